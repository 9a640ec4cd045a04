"""The live page at / on the broker's HTTP port, in a real browser (Debian's chromium, headless,
driven over the DevTools protocol) against a real broker with real producers and a trainer:
  - it loads with no console error and asks nothing of any other origin;
  - what it shows equals /status within one refresh (the counters lie between two /status
    snapshots taken around it, and once everything is still, they are equal);
  - a SIGKILLed producer shows as lost in its timeline within 2 seconds;
  - it stays readable at a phone's width (nothing wider than the screen);
  - with --token-file, /status and /metrics answer 401 without the token and the page asks for it;
  - a screenshot at a laptop's and a phone's width (STOKER_LIVE_OUT, else a temporary folder).
Usage: test_page.py [live|token] (both without an argument)."""

import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live import Broker, Chromium, http_get, wait_for  # noqa: E402

OUT = os.environ.get("STOKER_LIVE_OUT") or tempfile.mkdtemp(prefix="stoker-live-shots-")

# What the page shows, read from its DOM (numbers as the page printed them).
READ = """(() => {
  const num = (id) => { const t = document.getElementById(id).textContent.replace(/,/g, "");
                        return t === "\\u2013" ? null : Number(t); };
  return {
    uptime: Number(document.getElementById("uptime").dataset.uptime || -1),
    produced: num("produced"), acknowledged: num("acknowledged"), queued: num("queued"),
    in_flight: num("in_flight"), discrepancy: num("discrepancy"),
    verdict: document.getElementById("audit-verdict").textContent,
    wait: document.getElementById("wait").textContent,
    rate_in: document.getElementById("rate-in").textContent,
    rate_out: document.getElementById("rate-out").textContent,
    conn: document.getElementById("conn").textContent,
    producers: [...document.querySelectorAll("#producers tbody tr[data-producer]")].map((r) => ({
      id: Number(r.dataset.producer), state: r.dataset.state,
      name: r.querySelector("td.name").textContent,
      queued: Number(r.querySelector(".queued").textContent.replace(/,/g, "")),
      accepted: Number(r.querySelector(".accepted").textContent.replace(/,/g, "")) })),
    consumers: document.querySelectorAll("#consumers tbody tr[data-consumer]").length,
    jobs: [...document.querySelectorAll("#jobs tbody tr[data-job]")].map((r) => r.dataset.job),
    lost: [...document.querySelectorAll('#timeline li[data-kind="producer_lost"]')].map(
      (li) => li.dataset.name),
    kinds: [...document.querySelectorAll("#timeline li")].map((li) => li.dataset.kind),
  };
})()"""


def check_origin(chrome, origin):
    others = [u for u in chrome.requests()
              if not (u.startswith(origin + "/") or u == origin or u.startswith("data:")
                      or u.startswith("about:"))]
    assert not others, "the page asked another origin: %r" % others


def test_live():
    with Broker() as b, Chromium() as chrome:
        for i in (1, 2, 3):
            b.producer("aug-%d" % i, "--delay", "0.002:0.004")
        trainer = b.trainer("--rounds", "1000000", "--time-goal", "120", "--stall-timeout", "20")
        chrome.navigate(b.http + "/")
        shown = wait_for("the page to show 3 producers and the trainer",
                         lambda: (lambda s: s if len(s["producers"]) == 3 and s["consumers"] == 1
                                  and s["produced"] else None)(chrome.eval(READ)), 10)
        print("page up: %d producers, produced %d" % (len(shown["producers"]), shown["produced"]))

        # Within one refresh: the page's snapshot is no older than one taken before a refresh
        # period, and its counters lie between the two /status snapshots around it.
        first = b.status()
        for round_ in range(3):
            a = b.status()
            t0 = time.monotonic()
            # The page polls once a second: a snapshot newer than a's within one refresh (3 s
            # allowed on a loaded machine; the time it took is printed).
            s = wait_for("the page to show a snapshot newer than /status's",
                         lambda: (lambda s: s if s["uptime"] >= a["uptime_s"] else None)(
                             chrome.eval(READ)), 3, every=0.05)
            caught_s = time.monotonic() - t0
            z = b.status()
            assert a["uptime_s"] <= s["uptime"] <= z["uptime_s"], (a["uptime_s"], s["uptime"],
                                                                   z["uptime_s"])
            for k in ("produced", "acknowledged"):
                assert a["counters"][k] <= s[k] <= z["counters"][k], (k, a["counters"][k], s[k],
                                                                      z["counters"][k])
            assert s["produced"] == s["acknowledged"] + s["queued"] + s["in_flight"], s
            assert s["discrepancy"] == 0 and s["verdict"] == "holds", s
            assert s["conn"] == "live", s
            ids = sorted(p["id"] for p in z["producers"])
            assert sorted(p["id"] for p in s["producers"]) == ids, (s["producers"], ids)
            for p in s["producers"]:
                assert p["state"] == "alive" and 0 <= p["queued"] <= z["queue_depth"], p
            # The jobs sharing the producers (docs/sharing.md): one row each, as /status lists them.
            assert s["jobs"] == [j["name"] for j in z["jobs"]], (s["jobs"], z["jobs"])
            print("refresh %d: the page caught up in %.2f s; its uptime %.3f between %.3f and "
                  "%.3f; produced %d <= %d <= %d"
                  % (round_, caught_s, s["uptime"], a["uptime_s"], z["uptime_s"],
                     a["counters"]["produced"], s["produced"], z["counters"]["produced"]))
            time.sleep(0.5)
        # The data wait travels from the trainer to the page: the trainer waits for these slow
        # producers, so its wait grows and the page shows a share.
        w0 = first["consumers"][0]["data_wait_s"]
        w1 = z["consumers"][0]["data_wait_s"]
        assert w1 > w0, ("the trainer's data wait did not grow", w0, w1)
        assert s["wait"].endswith("%"), s["wait"]
        assert s["rate_in"] != "\u2013" and float(s["rate_in"]) > 0, s["rate_in"]

        # A SIGKILLed producer is lost in the timeline within 2 s.
        victim = b.procs[2]
        os.kill(victim.pid, signal.SIGKILL)
        t0 = time.monotonic()
        wait_for("aug-3 lost on the page", lambda: "aug-3" in chrome.eval(READ)["lost"], 2.0,
                 every=0.05)
        seen_s = time.monotonic() - t0
        print("SIGKILLed aug-3 shown lost after %.2f s" % seen_s)
        s = chrome.eval(READ)
        assert [p["state"] for p in s["producers"] if p["name"] == "aug-3"] == ["lost"], s
        assert "producer_joined" in s["kinds"], s["kinds"]

        # Screenshots: a laptop's width, then a phone's (nothing wider than the screen).
        chrome.pump(3)  # a few more points in the charts
        laptop = os.path.join(OUT, "live-page.png")
        chrome.screenshot(laptop)
        chrome.resize(390, 844, mobile=True)
        chrome.pump(1.5)
        over = chrome.eval("document.documentElement.scrollWidth")
        assert over <= 390, "the page is %d px wide at a phone's 390" % over
        phone = os.path.join(OUT, "live-page-phone.png")
        chrome.screenshot(phone)
        for path in (laptop, phone):
            with open(path, "rb") as f:
                assert f.read(8) == b"\x89PNG\r\n\x1a\n", path
            print("screenshot %s (%d bytes)" % (path, os.path.getsize(path)))
        chrome.resize(1280, 900)

        # Everything still: producers and the trainer killed, the broker settles (the lost
        # trainer's leases go back to the queues); then the page equals /status exactly.
        for p in b.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
        wait_for("the broker to settle", lambda: (lambda st: st["trainers"] == 0
                                                  and st["counters"]["in_flight"] == 0
                                                  and st["producers_alive"] == 0)(b.status()), 15)
        time.sleep(1.5)
        st = b.status()
        s = chrome.eval(READ)
        for k in ("produced", "acknowledged", "queued", "in_flight"):
            assert s[k] == st["counters"][k], (k, s[k], st["counters"][k])
        for p, q in zip(sorted(s["producers"], key=lambda p: p["id"]), st["producers"]):
            assert (p["id"], p["state"], p["queued"], p["accepted"]) == (
                q["id"], q["state"], q["queued"], q["accepted"]), (p, q)
        assert sorted(s["lost"]) == ["aug-1", "aug-2", "aug-3"], s["lost"]
        print("still: page equals /status (produced %d, acknowledged %d, queued %d)"
              % (st["counters"]["produced"], st["counters"]["acknowledged"],
                 st["counters"]["queued"]))
        assert trainer.poll() is not None

        errors = chrome.errors()
        assert not errors, "console errors: %r" % errors
        check_origin(chrome, b.http)
        print("no console error; %d requests, all to %s" % (len(chrome.requests()), b.http))


def test_token():
    token = "live-page-token-" + os.urandom(6).hex()
    with Broker(token=token) as b, Chromium(width=900, height=700) as chrome:
        b.producer("aug-1", "--delay", "0.002:0.004")
        bearer = {"Authorization": "Bearer " + token}
        for path in ("/status", "/metrics"):
            assert http_get(b.http + path)[0] == 401, path
            assert http_get(b.http + path, {"Authorization": "Bearer wrong"})[0] == 401, path
            assert http_get(b.http + path, {"Authorization": token})[0] == 401, path
            assert http_get(b.http + path, bearer)[0] == 200, path
        code, body = http_get(b.http + "/")
        assert code == 200 and "<title>stoker</title>" in body, code
        assert token not in body
        chrome.navigate(b.http + "/")
        wait_for("the page to ask for the token",
                 lambda: chrome.eval("document.getElementById('login').classList.contains('show')"),
                 5)
        assert chrome.eval(READ)["produced"] is None  # nothing shown without the token
        chrome.eval("document.getElementById('token').value = %r;"
                    "document.getElementById('login-form').requestSubmit(); true" % token)
        s = wait_for("the page to show the broker after the token",
                     lambda: (lambda s: s if s["produced"] and s["conn"] == "live" else None)(
                         chrome.eval(READ)), 5)
        assert not chrome.eval("document.getElementById('login').classList.contains('show')")
        print("token: 401 without it, the page asked, then showed produced %d" % s["produced"])
        # The only errors: the browser's note of the first /status answered 401.
        errors = [e for e in chrome.errors() if "401" not in e]
        assert not errors, errors
        check_origin(chrome, b.http)


if __name__ == "__main__":
    which = sys.argv[1:] or ["live", "token"]
    for name in which:
        {"live": test_live, "token": test_token}[name]()
        print("ok: %s" % name)
