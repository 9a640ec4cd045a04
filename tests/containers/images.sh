#!/usr/bin/env bash
# containers suite: the images. Makes the local Debian 12 base, builds the broker, producer and
# CPU trainer images from docker/Dockerfile on it, and checks what users rely on: each runs its
# binary as the unprivileged user stoker (uid 10001), carries no compiler, and the broker's image
# has its health check. Prints each image's size.
. "$(dirname "$0")/lib.sh"
containers_begin images
stoker_images

for t in broker producer trainer-cpu; do
    img=stoker-$t:$STOKER_TAG
    bin=stoker-${t%-cpu}
    user=$(docker image inspect --format '{{.Config.User}}' "$img")
    check "$img: USER is 10001:10001 ($user)" [ "$user" = 10001:10001 ]
    out=$(docker run --rm "$img" sh -c "id -u; $bin --version" 2>&1)
    check "$img: $bin --version runs as uid 10001 ($(echo "$out" | tr '\n' ' '))" \
        [ "$(echo "$out" | head -n 1)" = 10001 ]
    compilers=$(docker run --rm "$img" sh -c 'for c in gcc cc c++ g++ clang nvcc as ld meson ninja; do command -v $c; done; ls /usr/lib/gcc 2>/dev/null')
    check "$img: no compiler, assembler or linker in the image${compilers:+ (found: $(echo $compilers))}" [ -z "$compilers" ]
    echo "size: $img $(image_size "$img")"
done
hc=$(docker image inspect --format '{{json .Config.Healthcheck.Test}}' "stoker-broker:$STOKER_TAG")
check "broker image: health check requests /status ($hc)" grep -q 'http://127.0.0.1:9090/status' <<< "$hc"
echo "size: $CT_BASE $(image_size "$CT_BASE") (the local base)"
containers_end
