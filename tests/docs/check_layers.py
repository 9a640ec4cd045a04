#!/usr/bin/env python3
"""libstoker's floors and the broker's rooms, checked on the source and on the built objects.

What docs/design.md promises about the layout, as three checks:
1. Includes: a file in a floor of common/ includes only headers of its own floor or of floors
   below it (public headers under common/include/stoker/ belong to the floor the table below
   names, private headers to the folder they sit in).
2. Calls: an object of a floor uses no symbol defined in a floor above it (nm on the objects).
3. No circles: among libstoker's objects, the broker's, and those of producer/, trainer/, scale/
   and consumer/, no two files reach each other through the symbols they use (strongly
   connected components of the call graph).
4. The broker's floors (SERVER_FLOORS below): an object of server/ uses no symbol of a floor
   above its own, and no file of server/broker/ (the state machine, under one lock) includes a
   thread, socket or file API: those live in server/net/.
5. Sizes: no function of server/ over 100 lines, no file of server/ over 700, no floor of
   common/ over 4,000 lines, no file of common/client/ over 1,000.
6. The layout as docs/design.md tells it matches the tree (git ls-files): its folder table
   names every top-level folder, and its text names every C file of common/ and server/.
7. Code comments give reasons, not tracker numbers a clone cannot look up: no "issue N" in the
   code, build and test files.
Usage: check_layers.py SOURCE_ROOT BUILD_ROOT; exit 0 when every rule holds, 1 with each
violation named (file, symbol or header) otherwise.
"""
import os
import re
import subprocess
import sys

FLOORS = ["base", "data", "wire", "transport", "client", "runtime", "api"]
RANK = {f: i for i, f in enumerate(FLOORS)}
# The generated protobuf code sits between the data model and the wire: only wire/ uses it.
PROTO_RANK = 1.5
PUBLIC = {
    "base": ["error.h", "log.h", "text.h", "rng.h", "clock.h", "process.h", "opts.h"],
    "data": ["schema.h", "chunk.h", "labels.h", "batching.h", "mix.h"],
    "wire": ["protocol.h", "wire.h", "status.h"],
    "transport": ["client.h", "tls.h", "arena.h", "sp.h"],
    "client": ["trainer_client.h", "producer_client.h"],
    "runtime": ["producer.h", "generator.h", "synthetic.h"],
    "api": ["consumer.h", "cli.h"],
}
# The broker's floors, bottom up: each object calls only its own floor and those below. net/'s
# helpers with threads of their own but no broker state (the epochs' drawer, the arena) stand
# below the state machine; the server, intake and watchdog (sockets, threads) above it.
SERVER_FLOORS = [
    ["net/drawer", "net/arena_books"],
    ["net/arena"],
    ["broker/core", "broker/queue", "broker/trained", "broker/remake", "broker/epoch_remake"],
    ["broker/commit", "broker/budget", "broker/ahead", "broker/epoch", "broker/autoscale", "broker/queues",
     "broker/mix", "broker/jobs", "broker/jobs_room"],
    ["broker/lease", "broker/group_mix", "broker/shards"],
    ["broker/group", "broker/group_commit", "broker/drop"],
    ["broker/push", "broker/pull", "broker/session", "broker/report"],
    ["broker/loss"],
    ["broker/broker"],
    ["net/watchdog", "net/intake", "page"],
    ["net/server"],
]
SERVER_RANK = {name: i for i, names in enumerate(SERVER_FLOORS) for name in names}
# What server/broker/ may not include: the state machine does no I/O and starts no thread.
IO_HEADERS = {"pthread.h", "poll.h", "unistd.h", "fcntl.h", "sys/socket.h", "sys/un.h",
              "sys/mman.h", "sys/stat.h", "sys/epoll.h"}
SYSTEM_INCLUDE = re.compile(r'^\s*#\s*include\s+<([^>]+)>', re.M)
FUNCTION_MAX_LINES = 100
FILE_MAX_LINES = 700
FLOOR_MAX_LINES = 4000  # a floor of common/, its .c and .h files together
CLIENT_FILE_MAX_LINES = 1000
ISSUE_REF = re.compile(r"\b[Ii]ssue \d+")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def header_floor(src, name):
    """The floor a quoted include names, or None for one outside libstoker (config.h)."""
    if name.startswith("stoker/"):
        base = name[len("stoker/"):]
        for floor, headers in PUBLIC.items():
            if base in headers:
                return floor
        raise SystemExit("check_layers: public header %s has no floor in the table" % name)
    if name == "stoker.pb-c.h":
        return "proto"
    for floor in FLOORS:
        if os.path.exists(os.path.join(src, "common", floor, name)):
            return floor
    return None


def check_includes(src):
    bad = []
    public_dir = os.path.join(src, "common", "include", "stoker")
    files = [(f, os.path.join(public_dir, h)) for f, hs in PUBLIC.items() for h in hs]
    listed = {h for hs in PUBLIC.values() for h in hs}
    for h in sorted(os.listdir(public_dir)):
        if h not in listed:
            bad.append("common/include/stoker/%s: not in check_layers.py's table of floors" % h)
    for floor in FLOORS:
        d = os.path.join(src, "common", floor)
        for name in sorted(os.listdir(d)):
            if name.endswith((".c", ".h")):
                files.append((floor, os.path.join(d, name)))
    for floor, path in files:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        for inc in INCLUDE.findall(text):
            target = header_floor(src, inc)
            if target is None:
                continue
            rank = PROTO_RANK if target == "proto" else RANK[target]
            if rank > RANK[floor] or (target == "proto" and floor != "wire"):
                bad.append("%s (%s) includes %s (%s)" %
                           (os.path.relpath(path, src), floor, inc, target))
    return bad


def symbols(obj):
    out = subprocess.run(["nm", "-P", obj], check=True, capture_output=True, text=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        sym, kind = parts[0], parts[1]
        if kind == "U":
            used.add(sym)
        elif kind in "TDBRVWC" and kind.isupper():
            defined.add(sym)
    return defined, used


def graph(objs):
    """obj -> {obj it uses: [symbols]} over the given objects."""
    syms = {o: symbols(o) for o in objs}
    owner = {}
    for o, (defined, _) in syms.items():
        for s in defined:
            owner[s] = o
    edges = {o: {} for o in objs}
    for o, (_, used) in syms.items():
        for s in used:
            d = owner.get(s)
            if d is not None and d != o:
                edges[o].setdefault(d, []).append(s)
    return edges


def circles(edges):
    """Tarjan's strongly connected components with more than one member."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in edges:
        if v not in index:
            visit(v)
    return out


def objects(d):
    if not os.path.isdir(d):
        raise SystemExit("check_layers: %s not built (run the build first)" % d)
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".o"))


def server_name(obj):
    """broker/lease for broker_lease.c.o, page for the generated page."""
    name = os.path.basename(obj)[:-len(".c.o")]
    if name.startswith("meson-generated_"):
        return "page"
    folder, rest = name.split("_", 1)
    return folder + "/" + rest


def check_server(src, objs):
    bad = []
    edges = graph(objs)
    for a, uses in edges.items():
        na = server_name(a)
        if na not in SERVER_RANK:
            bad.append("server/%s: not in check_layers.py's SERVER_FLOORS" % na)
            continue
        for b, syms in uses.items():
            nb = server_name(b)
            if SERVER_RANK.get(nb, -1) > SERVER_RANK[na]:
                bad.append("server/%s (floor %d) calls up into server/%s (floor %d): %s" %
                           (na, SERVER_RANK[na], nb, SERVER_RANK[nb], ", ".join(sorted(syms)[:4])))
    for folder in ("broker", "net"):
        d = os.path.join(src, "server", folder)
        for name in sorted(os.listdir(d)):
            path = os.path.join(d, name)
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            rel = "server/%s/%s" % (folder, name)
            if folder == "broker":
                for inc in SYSTEM_INCLUDE.findall(text):
                    if inc in IO_HEADERS:
                        bad.append("%s: the state machine includes <%s> (I/O and threads live "
                                   "in server/net/)" % (rel, inc))
            lines = text.split("\n")
            if len(lines) > FILE_MAX_LINES:
                bad.append("%s: %d lines, more than %d" % (rel, len(lines), FILE_MAX_LINES))
            start = None
            for i, line in enumerate(lines):
                if line.startswith("{"):
                    start = i
                elif line.startswith("}") and start is not None:
                    if i - start + 1 > FUNCTION_MAX_LINES:
                        bad.append("%s:%d: %s is %d lines, more than %d" %
                                   (rel, start, lines[start - 1].split("(")[0].strip(),
                                    i - start + 1, FUNCTION_MAX_LINES))
                    start = None
    return edges, bad


def check_floor_sizes(src):
    bad = []
    for floor in FLOORS:
        d = os.path.join(src, "common", floor)
        total = 0
        for name in sorted(os.listdir(d)):
            if name.endswith((".c", ".h")):
                with open(os.path.join(d, name), encoding="utf-8") as fh:
                    n = fh.read().count("\n")
                total += n
                if floor == "client" and n > CLIENT_FILE_MAX_LINES:
                    bad.append("common/client/%s: %d lines, more than %d" %
                               (name, n, CLIENT_FILE_MAX_LINES))
        if total > FLOOR_MAX_LINES:
            bad.append("common/%s/: %d lines, more than %d" % (floor, total, FLOOR_MAX_LINES))
    return bad


def check_design_layout(src):
    """docs/design.md against `git ls-files`: folders in its table, C files in its text."""
    try:
        files = subprocess.run(["git", "-C", src, "ls-files"], check=True, capture_output=True,
                               text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        print("layers: not a git checkout: docs/design.md's layout not compared with the tree")
        return []
    with open(os.path.join(src, "docs", "design.md"), encoding="utf-8") as fh:
        design = fh.read()
    bad = []
    folders = sorted({f.split("/")[0] for f in files if "/" in f and not f.startswith(".")})
    for d in folders:
        if not re.search(r"`%s/`" % re.escape(d), design):
            bad.append("docs/design.md: the folder %s/ is not in its table of folders" % d)
    code = (".c", ".h", ".cu", ".py", ".sh", ".proto", ".map", "meson.build", ".js", ".html")
    for f in files:
        if f.endswith(code) and os.path.isfile(os.path.join(src, f)):
            with open(os.path.join(src, f), encoding="utf-8", errors="replace") as fh:
                for n, line in enumerate(fh, 1):
                    if ISSUE_REF.search(line):
                        bad.append("%s:%d: names a tracker issue; say the reason instead" % (f, n))
    for f in files:
        if f.endswith(".c") and (f.startswith("common/") or f.startswith("server/")):
            if not re.search(r"(?<!\w)%s(?!\w)" % re.escape(os.path.basename(f)), design):
                bad.append("docs/design.md: %s is not named in its layout" % f)
    return bad


def floor_of(obj):
    name = os.path.basename(obj)
    if name.startswith("meson-generated_"):
        return "proto"
    return name.split("_", 1)[0]


def label(obj, where="libstoker"):
    name = os.path.basename(obj)[:-len(".o")]
    floor = floor_of(obj)
    if where == "libstoker" and floor in RANK:
        return "common/%s/%s" % (floor, name.split("_", 1)[1])
    return "server/%s.c" % server_name(obj) if where == "server" else name


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-3])
        return 2
    src, build = sys.argv[1], sys.argv[2]
    bad = check_includes(src) + check_design_layout(src) + check_floor_sizes(src)

    lib = objects(os.path.join(build, "common", "libstoker.a.p"))
    for o in lib:
        if floor_of(o) not in RANK and floor_of(o) != "proto":
            bad.append("%s: an object outside every floor" % os.path.basename(o))
    lib_edges = graph(lib)
    for a, uses in lib_edges.items():
        for b, syms in uses.items():
            fa, fb = floor_of(a), floor_of(b)
            ra = PROTO_RANK if fa == "proto" else RANK.get(fa, -1)
            rb = PROTO_RANK if fb == "proto" else RANK.get(fb, -1)
            if rb > ra:
                bad.append("%s (%s) calls up into %s (%s): %s" %
                           (label(a), fa, label(b), fb, ", ".join(sorted(syms)[:4])))
    broker = objects(os.path.join(build, "server", "libbroker_core.a.p"))
    server_edges, server_bad = check_server(src, broker)
    bad += server_bad
    # The executables' own objects: producer/, trainer/, scale/, consumer/ (each program's
    # objects together with the libraries of its folder).
    for folder in ("producer", "trainer", "scale", "consumer"):
        d = os.path.join(build, folder)
        objs = []
        for sub in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if sub.endswith(".p") and os.path.isdir(os.path.join(d, sub)):
                objs += [os.path.join(d, sub, n) for n in sorted(os.listdir(os.path.join(d, sub)))
                         if n.endswith(".o")]
        for comp in circles(graph(objs)):
            bad.append("%s: circle between %s" % (folder, ", ".join(
                "%s/%s" % (os.path.basename(os.path.dirname(o)), os.path.basename(o))
                for o in comp)))
    for edges, where in ((lib_edges, "libstoker"), (server_edges, "server")):
        for comp in circles(edges):
            ring = [label(o, where) for o in comp]
            detail = []
            for o in comp:
                for d, syms in edges[o].items():
                    if d in comp:
                        detail.append("%s -> %s (%s)" % (os.path.basename(o)[:-2],
                                                         os.path.basename(d)[:-2],
                                                         ", ".join(sorted(syms)[:3])))
            bad.append("%s: circle between %s: %s" % (where, ", ".join(ring), "; ".join(detail)))

    n_files = len(lib) + len(broker)
    if bad:
        for b in bad:
            print("layers: " + b)
        print("layers: %d violations" % len(bad))
        return 1
    print("layers: %d objects in libstoker's %d floors and the broker's %d: no call up a floor, "
          "no circle, no I/O in the state machine, no function or file too long"
          % (n_files, len(FLOORS), len(SERVER_FLOORS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
