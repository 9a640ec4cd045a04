#!/usr/bin/env python3
"""libstoker's floors and the broker's rooms, checked on the source and on the built objects.

What docs/design.md promises about the layout, as three checks:
1. Includes: a file in a floor of common/ includes only headers of its own floor or of floors
   below it (public headers under common/include/stoker/ belong to the floor the table below
   names, private headers to the folder they sit in).
2. Calls: an object of a floor uses no symbol defined in a floor above it (nm on the objects).
3. No circles: among libstoker's objects no two files reach each other through the symbols
   they use (strongly connected components of the call graph); in server/ the dispatcher
   (broker.c), the broker's core (broker_core.c), server.c and the watchdog are in no circle:
   the core is below every room, the dispatcher above them, the watchdog below server.c. Circles
   among the rooms themselves (a lease that asks the group, a group that takes a lease) are
   printed as notes: they are one state machine's parts calling each other.
Usage: check_layers.py SOURCE_ROOT BUILD_ROOT; exit 0 when every rule holds, 1 with each
violation named (file, symbol or header) otherwise.
"""
import os
import re
import subprocess
import sys

FLOORS = ["base", "data", "wire", "transport", "client", "runtime"]
RANK = {f: i for i, f in enumerate(FLOORS)}
# The generated protobuf code sits between the data model and the wire: only wire/ uses it.
PROTO_RANK = 1.5
PUBLIC = {
    "base": ["error.h", "log.h", "text.h", "rng.h", "clock.h", "process.h", "opts.h"],
    "data": ["schema.h", "chunk.h", "labels.h", "batching.h"],
    "wire": ["protocol.h", "wire.h", "status.h"],
    "transport": ["client.h", "tls.h", "arena.h", "sp.h"],
    "client": ["trainer_client.h", "consumer.h", "producer_client.h", "cli.h"],
    "runtime": ["producer.h", "generator.h", "synthetic.h"],
}
# The broker's files that must stand in no circle (see the docstring).
SERVER_ACYCLIC = {"broker.c.o", "broker_core.c.o", "server.c.o", "watchdog.c.o"}
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
    return "server/" + name if where == "server" else name


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-3])
        return 2
    src, build = sys.argv[1], sys.argv[2]
    bad = check_includes(src)

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
    notes = []
    for edges, where in ((lib_edges, "libstoker"), (graph(broker), "server")):
        for comp in circles(edges):
            ring = [label(o, where) for o in comp]
            detail = []
            for o in comp:
                for d, syms in edges[o].items():
                    if d in comp:
                        detail.append("%s -> %s (%s)" % (os.path.basename(o)[:-2],
                                                         os.path.basename(d)[:-2],
                                                         ", ".join(sorted(syms)[:3])))
            line = "%s: circle between %s: %s" % (where, ", ".join(ring), "; ".join(detail))
            named = {os.path.basename(o) for o in comp} & SERVER_ACYCLIC
            if where == "server" and not named:
                notes.append(line)
            else:
                bad.append(line)
    for n in notes:
        print("layers: note: " + n)

    n_files = len(lib) + len(broker)
    if bad:
        for b in bad:
            print("layers: " + b)
        print("layers: %d violations" % len(bad))
        return 1
    print("layers: %d objects in %d floors and the broker's rooms: no call up a floor, no circle"
          % (n_files, len(FLOORS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
