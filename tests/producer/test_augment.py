"""Each operation of the images generator's augment spec (producer/augment.c) against an
independent reference: Pillow and torchvision's functional transforms on PIL images, on smooth
random photo-like pictures. stoker computes in float where PIL rounds to 8 bits after each step,
so each check states a tolerance in 8-bit levels: the largest and the mean absolute difference.
Run by meson with STOKER_AUGMENT_TOOL set; exits 77 (skip) without Pillow, torchvision or numpy.

    /usr/bin/python3 tests/producer/test_augment.py
"""
import os
import subprocess
import sys

try:
    import numpy as np
    from PIL import Image
    import torchvision.transforms.functional as F
    from torchvision.transforms import InterpolationMode
except ImportError as e:  # pragma: no cover
    print("skip: %s (python3-pil, python3-torchvision, python3-numpy)" % e)
    sys.exit(77)

TOOL = os.environ.get("STOKER_AUGMENT_TOOL", "build/tests/producer/augment_tool")


def picture(w, h, seed):
    """A smooth color field with edges and some fine texture, (h, w, 3) uint8."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.zeros((h, w, 3))
    for c in range(3):
        fx, fy, ph = rng.uniform(0.02, 0.15), rng.uniform(0.02, 0.15), rng.uniform(0, 6.3)
        img[..., c] = 128 + 90 * np.sin(fx * x + ph) * np.cos(fy * y)
    img[h // 3:h // 2, w // 4:w // 2] = rng.uniform(0, 255, 3)  # a sharp-edged block
    img += rng.normal(0, 12, img.shape)  # texture: high frequencies for the antialias check
    return np.clip(img, 0, 255).astype(np.uint8)


def stoker(spec, img, out_h, out_w, seed=1):
    h, w, _ = img.shape
    res = subprocess.run([TOOL, spec, str(seed), str(w), str(h), str(out_h), str(out_w)],
                         input=img.tobytes(), capture_output=True, check=True)
    return np.frombuffer(res.stdout, dtype=np.float32).reshape(out_h, out_w, 3)


# A reduced JPEG decode against the full-size path (test_jpeg_draft_stays_antialiased_...): the
# 99.9th-percentile and mean difference in 8-bit levels, and the relative difference in
# high-frequency energy allowed. Measured on these pictures: at most 26 (at the sharp-edged
# block, where the reduced DCT rings), 1.8 on average, and 15 % more high-frequency energy than
# PIL's full-size resize where the reduction does all the shrinking (1/4, then 80 to 80); plain
# bilinear without antialiasing keeps 54 % more (test_resize_down_is_antialiased_like_pil).
DRAFT_MAX, DRAFT_MEAN, DRAFT_HF = 30.0, 2.0, 0.2
# A reduced decode then resized, against Pillow's draft() then resize: PIL rounds to 8 bits
# after each of its two passes, stoker once, so the mean difference is a little over the 0.3
# of a single pass.
DRAFT_PIL_MEAN = 0.35


def expect_close(name, ours, ref, max_abs, mean_abs, quantile=1.0):
    ref = np.asarray(ref, dtype=np.float64)
    assert ours.shape == ref.shape, (name, ours.shape, ref.shape)
    diff = np.abs(ours.astype(np.float64) - ref)
    worst = np.quantile(diff, quantile) if quantile < 1.0 else diff.max()
    print("%-28s max %.3f (q%.3g %.3f) mean %.4f  [allowed %.2g, %.2g]"
          % (name, diff.max(), quantile, worst, diff.mean(), max_abs, mean_abs))
    if not os.environ.get("STOKER_AUGMENT_REPORT"):  # set: print every difference, assert none
        assert worst <= max_abs and diff.mean() <= mean_abs, name


def pil(img):
    return Image.fromarray(img, "RGB")


def test_resize_down_is_antialiased_like_pil():
    img = picture(160, 120, 1)
    ours = stoker("resize(36,50)", img, 36, 50)
    ref = np.asarray(pil(img).resize((50, 36), Image.BILINEAR))
    expect_close("resize down (antialias)", ours, ref, 1.0, 0.3)
    # High-frequency energy (squared neighbour differences) matches PIL's; plain bilinear
    # without antialiasing (the default pipeline's, torchvision's antialias=False) keeps more.
    naive = 255 * np.asarray(F.resize(F.to_tensor(img), [36, 50], antialias=False))
    naive = naive.transpose(1, 2, 0)
    hf = lambda a: (np.diff(a.astype(np.float64), axis=1) ** 2).mean()  # noqa: E731
    print("high-frequency energy: stoker %.1f, PIL %.1f, no antialias %.1f"
          % (hf(ours), hf(ref), hf(naive)))
    assert abs(hf(ours) / hf(ref) - 1) < 0.05 and hf(naive) > 1.2 * hf(ours)


def test_resize_up_like_pil():
    img = picture(30, 20, 2)
    ours = stoker("resize(45,70)", img, 45, 70)
    ref = np.asarray(pil(img).resize((70, 45), Image.BILINEAR))
    expect_close("resize up", ours, ref, 1.0, 0.3)


def test_eval_pipeline_like_torchvision_resize_center_crop():
    for w, h in ((120, 90), (90, 131)):
        img = picture(w, h, 3)
        ours = stoker("resize(73),ccrop(64)", img, 64, 64)
        ref = np.asarray(F.center_crop(F.resize(pil(img), 73), 64))
        expect_close("resize(73),ccrop(64) %dx%d" % (w, h), ours, ref, 1.0, 0.3)


def test_center_crop_pads_with_zeros_like_torchvision():
    img = picture(21, 15, 4)
    ours = stoker("ccrop(20,26)", img, 20, 26)
    expect_close("ccrop with padding", ours, np.asarray(F.center_crop(pil(img), [20, 26])), 0, 0)


def test_hflip():
    img = picture(33, 17, 5)
    expect_close("hflip(1)", stoker("hflip(1),ccrop", img, 17, 33),
                 np.asarray(F.hflip(pil(img))), 0, 0)
    expect_close("hflip(0)", stoker("hflip(0),ccrop", img, 17, 33), img, 0, 0)


def test_color_jitter_operations_like_torchvision():
    img = picture(64, 48, 6)
    # PIL truncates each blend to 8 bits (up to 1 level, 0.5 on average); contrast also rounds
    # its mean gray; hue goes through PIL's 8-bit HSV (hue in 1/256 turns, the shift rounded
    # to int(h * 255) of them), up to a few levels on saturated pixels.
    cases = [("b", 1.3, F.adjust_brightness, 1.0, 0.5), ("b", 0.6, F.adjust_brightness, 1.0, 0.5),
             ("c", 1.4, F.adjust_contrast, 1.5, 0.7), ("c", 0.6, F.adjust_contrast, 1.5, 0.7),
             ("s", 1.4, F.adjust_saturation, 1.0, 0.5), ("s", 0.0, F.adjust_saturation, 1.0, 0.5),
             ("h", 0.1, F.adjust_hue, 10.0, 1.0), ("h", -0.35, F.adjust_hue, 10.0, 1.0)]
    for key, f, fn, max_abs, mean_abs in cases:
        ours = stoker("jitter(%s=%g:%g),ccrop" % (key, f, f), img, 48, 64)
        expect_close("jitter %s=%g" % (key, f), ours, np.asarray(fn(pil(img), f)), max_abs,
                     mean_abs, quantile=0.999)


def test_rotation_like_pil_bilinear():
    img = picture(64, 48, 7)
    for deg in (10.0, -25.0, 90.0):
        ours = stoker("rotate(%g:%g),ccrop" % (deg, deg), img, 48, 64)
        ref = np.asarray(F.rotate(pil(img), deg, interpolation=InterpolationMode.BILINEAR))
        # Pixels on the rotated border are in or out by a hair's breadth: a few may differ.
        expect_close("rotate %g" % deg, ours, ref, 1.0, 0.5, quantile=0.99)


def test_gaussian_blur_like_torchvision():
    img = picture(40, 30, 8)
    for k, sigma in ((5, 1.5), (9, 0.8)):
        ours = stoker("blur(%d;%g,%g),ccrop" % (k, sigma, sigma), img, 30, 40)
        ref = np.asarray(F.gaussian_blur(pil(img), [k, k], [sigma, sigma]))
        expect_close("blur k=%d sigma=%g" % (k, sigma), ours, ref, 1.0, 0.3)


def test_random_resized_crop_of_the_whole_image_is_a_resize():
    img = picture(80, 80, 9)
    ours = stoker("rrc(1,1;1,1)", img, 24, 24)
    expect_close("rrc(1,1;1,1)", ours, np.asarray(pil(img).resize((24, 24), Image.BILINEAR)),
                 1.0, 0.3)


def test_random_resized_crop_is_some_crop_of_the_right_area():
    # scale 0.25, ratio 1 on a 64x64 picture: a 32x32 crop somewhere, resized to 16x16 as PIL
    # resizes that crop; find the offset among all and check the match.
    img = picture(64, 64, 10)
    for seed in (1, 2, 3):
        ours = stoker("rrc(0.25,0.25;1,1)", img, 16, 16, seed)
        best = min(
            (np.abs(ours - np.asarray(pil(img[t:t + 32, l:l + 32]).resize((16, 16),
                                                                          Image.BILINEAR))).max(),
             t, l) for t in range(33) for l in range(33))
        print("rrc crop seed %d: best offset (%d, %d), max diff %.3f" % (seed, best[1], best[2],
                                                                         best[0]))
        assert best[0] <= 1.0, best


def test_random_erasing_blanks_one_box_of_the_right_area():
    # scale 0.1, ratio 1 of 40x40: a round(sqrt(160)) = 13 pixel square, filled with 0 without
    # normalize and with the mean color (0 once normalized) with it; the rest untouched.
    img = picture(40, 40, 12)
    for seed in (1, 2, 3):
        for spec, fill in (("ccrop,erase(1;0.1,0.1;1,1)", [0, 0, 0]),
                           ("ccrop,erase(1;0.1,0.1;1,1),normalize",
                            [0.485 * 255, 0.456 * 255, 0.406 * 255])):
            ours = stoker(spec, img, 40, 40, seed)
            box = np.all(np.abs(ours - np.float32(fill)) < 1e-3, axis=2)
            ys, xs = np.nonzero(box & np.any(ours != img, axis=2))
            top, left = ys.min(), xs.min()
            assert (ys.max() - top, xs.max() - left) == (12, 12), (spec, seed, ys, xs)
            assert box[top:top + 13, left:left + 13].all()
            rest = np.ones((40, 40), bool)
            rest[top:top + 13, left:left + 13] = False
            assert np.array_equal(ours[rest], img[rest].astype(np.float32)), (spec, seed)
    print("erase: 13x13 boxes where expected")


def test_same_seed_same_pixels():
    img = picture(70, 50, 11)
    spec = "rrc(0.08,1;0.75,1.33),hflip,jitter(b=0.4,c=0.4,s=0.4,h=0.1),rotate(15),blur(3),erase"
    a, b = stoker(spec, img, 32, 32, 7), stoker(spec, img, 32, 32, 7)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, stoker(spec, img, 32, 32, 8))


def randaug_op(name, magnitude, img):
    w, h = img.shape[1], img.shape[0]
    res = subprocess.run([TOOL, "--op", name, repr(magnitude), str(w), str(h)],
                         input=img.tobytes(), capture_output=True, check=True)
    return np.frombuffer(res.stdout, dtype=np.float32).reshape(h, w, 3)


def randaug_space(w, h):
    """torchvision's RandAugment operations with their magnitudes at bin 9 of 31 (both signs
    where signed), as (name, magnitude) pairs."""
    from torchvision.transforms import RandAugment
    space = RandAugment()._augmentation_space(31, (h, w))  # forward() passes (height, width)
    out = []
    for name, (mags, signed) in space.items():
        m = float(mags[9].item()) if mags.ndim > 0 else 0.0
        out += [(name, m)] + ([(name, -m)] if signed else [])
    return out


# RandAugment's operations one by one against torchvision's own _apply_op on a PIL image
# (nearest-neighbour geometry, fill 0), in 8-bit levels: the geometric ones and the lookup
# tables (posterize, solarize, equalize) exact, the blends within PIL's truncation (as jitter).
RANDAUG_TOLERANCE = {
    "Identity": (0, 0), "ShearX": (0, 0), "ShearY": (0, 0), "TranslateX": (0, 0),
    "TranslateY": (0, 0), "Rotate": (0, 0), "Brightness": (1.0, 0.5), "Color": (1.5, 0.6),
    "Contrast": (1.5, 0.7), "Sharpness": (1.5, 0.6), "Posterize": (0, 0), "Solarize": (0, 0),
    "AutoContrast": (1.0, 0.5), "Equalize": (0, 0)}


def test_randaugment_operations_like_torchvision():
    from torchvision.transforms.autoaugment import _apply_op
    img = picture(64, 48, 13)
    for name, m in randaug_space(64, 48):
        ref = np.asarray(_apply_op(pil(img), name, m, InterpolationMode.NEAREST, None))
        max_abs, mean_abs = RANDAUG_TOLERANCE[name]
        # Geometry: a pixel whose source position lands within float rounding of a pixel edge
        # may be taken from the neighbour; allow 0.2 % of them.
        q = 0.998 if name in ("ShearX", "ShearY", "Rotate") else 1.0
        expect_close("randaug %s %.3g" % (name, m), randaug_op(name, m, img), ref, max_abs,
                     max(mean_abs, 0.2 if q < 1 else 0), quantile=q)


def test_randaug_policy_draws_torchvision_operations_and_is_seeded():
    # randaug(n=1,m=9): each example is one of the operations above (either sign), chosen by
    # its seed; the same seed gives the same pixels, other seeds other operations.
    from torchvision.transforms.autoaugment import _apply_op
    img = picture(40, 30, 14)
    candidates = [(n, m, np.asarray(_apply_op(pil(img), n, m, InterpolationMode.NEAREST, None),
                                    dtype=np.float64)) for n, m in randaug_space(40, 30)]
    chosen = set()
    for seed in range(1, 25):
        ours = stoker("randaug(n=1,m=9)", img, 30, 40, seed)
        assert np.array_equal(ours, stoker("randaug(n=1,m=9)", img, 30, 40, seed))
        best = min(candidates, key=lambda c: np.abs(ours - c[2]).mean())
        assert np.abs(ours - best[2]).mean() <= 0.7, (seed, best[:2])
        chosen.add(best[0])
    print("randaug(n=1,m=9): 24 seeds drew %d different operations" % len(chosen))
    assert len(chosen) >= 6, chosen
    two = [stoker("randaug(2,9),normalize", img, 30, 40, s) for s in (5, 5, 6)]
    assert np.array_equal(two[0], two[1]) and not np.array_equal(two[0], two[2])


def jpeg_file(img, name):
    """img saved as a JPEG (quality 90, as the benchmark's photos) in a temporary folder that
    is removed at exit."""
    import atexit
    import shutil
    import tempfile
    folder = tempfile.mkdtemp(prefix="stoker-augment-")
    atexit.register(shutil.rmtree, folder, True)
    path = os.path.join(folder, name)
    pil(img).save(path, quality=90)
    return path


def stoker_jpeg(path, spec, out_h, out_w, seed=1, full=False):
    """The images generator's way with a JPEG: decoded reduced where the spec's first resampling
    allows (--jpeg-draft on), or at full size; returns the pixels and the scale used."""
    res = subprocess.run([TOOL, "--jpeg", path, spec, str(seed), str(out_h), str(out_w)]
                         + (["--full"] if full else []), capture_output=True, check=True)
    out = np.frombuffer(res.stdout, dtype=np.float32).reshape(out_h, out_w, 3)
    return out, int(res.stderr.decode().split()[-1])


def drafted(path, w, h):
    """Pillow's own reduced decode: Image.draft to at least w x h, as PIL's thumbnail does."""
    im = Image.open(path)
    im.draft("RGB", (w, h))
    return im.convert("RGB")


def hf(a):
    """High-frequency energy: mean squared difference of horizontal neighbours."""
    return (np.diff(np.asarray(a, dtype=np.float64), axis=1) ** 2).mean()


def test_jpeg_draft_is_pillow_draft_then_the_same_resize():
    # The reduced decode (libjpeg's DCT scaling) is Pillow's draft(); the resize after it is the
    # same antialiased bilinear resize of the same pixels, with the box mapped onto them
    # (fractional where the size is not a multiple: 321 x 241 at 1/4).
    cases = [((320, 240), "resize(60,80)", (60, 80), 4, None),
             ((321, 241), "resize(60,80)", (60, 80), 4, (0, 0, 321 / 4, 241 / 4)),
             ((256, 256), "rrc(1,1;1,1)", (24, 24), 8, None),
             ((320, 240), "resize(30,40)", (30, 40), 8, None),
             ((320, 240), "resize(100,100)", (100, 100), 2, None)]
    for (w, h), spec, (oh, ow), scale, box in cases:
        path = jpeg_file(picture(w, h, 20 + w), "p.jpg")
        ours, used = stoker_jpeg(path, spec, oh, ow)
        assert used == scale, (spec, w, h, used)
        small = drafted(path, ow, oh)
        assert small.size == ((w + scale - 1) // scale, (h + scale - 1) // scale), small.size
        ref = np.asarray(small.resize((ow, oh), Image.BILINEAR, box=box))
        expect_close("draft %dx%d %s" % (w, h, spec), ours, ref, 1.0, DRAFT_PIL_MEAN)


def test_jpeg_draft_eval_pipeline_like_pillow_draft():
    for w, h in ((320, 240), (240, 330)):
        path = jpeg_file(picture(w, h, 21), "e.jpg")
        ours, used = stoker_jpeg(path, "resize(73),ccrop(64)", 64, 64)
        assert used == 2, used
        ref = np.asarray(F.center_crop(F.resize(drafted(path, 73, 73), 73), 64))
        expect_close("draft resize(73),ccrop(64) %dx%d" % (w, h), ours, ref, 1.0,
                     DRAFT_PIL_MEAN)


def test_jpeg_draft_stays_antialiased_and_close_to_the_full_size_path():
    # Against the full-size decode and PIL's resize: the DCT reduction averages where the
    # bilinear filter weighs, so pixels move a little more than the 1-level tolerance of the
    # operations above, but the high frequencies stay as low as PIL's (no aliasing comes back).
    path = jpeg_file(picture(320, 240, 22), "a.jpg")
    full = Image.open(path).convert("RGB")
    for spec, (oh, ow) in (("resize(60,80)", (60, 80)), ("resize(36,50)", (36, 50)),
                           ("resize(100,100)", (100, 100))):
        ours, used = stoker_jpeg(path, spec, oh, ow)
        exact, _ = stoker_jpeg(path, spec, oh, ow, full=True)
        ref = np.asarray(full.resize((ow, oh), Image.BILINEAR))
        expect_close("--jpeg-draft off %s" % spec, exact, ref, 1.0, 0.3)
        expect_close("draft %s vs full size" % spec, ours, ref, DRAFT_MAX, DRAFT_MEAN,
                     quantile=0.999)
        print("high-frequency energy %s: draft %.1f, PIL full size %.1f (1/%d)"
              % (spec, hf(ours), hf(ref), used))
        assert used > 1 and abs(hf(ours) / hf(ref) - 1) < DRAFT_HF


def main():
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_")]
    for name, fn in tests:
        print("--", name)
        fn()
    print("ok: %d tests" % len(tests))


if __name__ == "__main__":
    main()
