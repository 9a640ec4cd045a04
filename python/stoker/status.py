"""python -m stoker.status URL [--token-file F] [--json] [--timeout SEC]
                            [--tls-ca F [--tls-cert F --tls-key F] | --tls-insecure]

Prints a stoker broker's status: its counters, then one row per producer, one per consumer
(with its delivery path, "shm" or "socket") and one per job when jobs share the producers. The
keys are those of the broker's /status page (--json prints them all), rendered by libstoker from
the same snapshot.
URL is the broker's address (tcp://HOST:PORT, ipc:///path, tls+tcp://HOST:PORT) or its metrics
address (http://HOST:PORT, the broker's --metrics: its /status page is read over HTTP).
A tls+tcp:// URL needs --tls-ca (the broker is verified) or --tls-insecure, and --tls-cert with
--tls-key when the broker requires client certificates.
Exit codes: 0 printed, 1 the broker did not answer (or the TLS handshake failed: the message says
why), 2 usage.
"""

import argparse
import http.client
import json
import sys
import urllib.error
import urllib.request

from .client import StokerError, status

COUNTERS = ["produced", "acknowledged", "queued", "in_flight", "redelivered", "returned_unused",
            "delivered", "queued_bytes", "refused", "short_by_queues", "producers_lost",
            "discrepancy"]
CONSUMER_COLUMNS = ["id", "name", "pid", "connected", "delivery", "batches_shm", "batches_socket",
                    "arena_full", "data_wait_s"]
LABELS_SHOWN = 10  # classes of a label map the table names (--json has them all)
PRODUCER_COLUMNS = ["id", "name", "state", "queued", "accepted", "delivered", "acknowledged",
                    "redelivered", "returned_unused", "next_seq", "silent_s", "session"]
JOB_COLUMNS = ["job", "state", "trainers", "made", "remade", "delivered", "acknowledged", "queued",
               "lag", "rate", "data_wait_s"]


def table(rows, headers):
    """Formats rows (lists of values) under headers as an aligned text table."""
    cells = [[str(h) for h in headers]] + [[str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r):
        return "  ".join(c.rjust(w) if c.lstrip("-").isdigit() else c.ljust(w)
                         for c, w in zip(r, widths)).rstrip()

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells[1:]]
    return "\n".join(out)


def format_status(st, url=""):
    c = st["counters"]
    lines = ["broker %s: %d producers alive, %d trainers (%d through shared memory), up %.1f s, "
             "schema %s" % (url, st["producers_alive"], st["trainers"], st.get("trainers_shm", 0),
                            st["uptime_s"], st["schema"] or "(none yet)"),
             ""]
    lines.append(table([[k, c.get(k, "")] for k in COUNTERS], ["counter", "value"]))
    lines.append("")
    if st["producers"]:
        lines.append(table([[p.get(k, "") for k in PRODUCER_COLUMNS] for p in st["producers"]],
                           PRODUCER_COLUMNS))
    else:
        lines.append("no producers")
    if st.get("consumers"):  # each consumer's delivery path (docs/shm.md)
        lines.append("")
        lines.append(table([["-" if c.get(k) is None else c.get(k, "") for k in CONSUMER_COLUMNS]
                            for c in st["consumers"]], CONSUMER_COLUMNS))
    if st.get("jobs"):  # jobs sharing the producers (docs/sharing.md)
        lines.append("")
        lines.append(table([[j["name"] or "(default)", j["state"], j["trainers"], j["made"],
                             j.get("remade", 0), j["delivered"], j["acknowledged"], j["queued"], j["lag"],
                             "%.0f" % j.get("rate", 0), "%.1f" % j["data_wait_s"]]
                            for j in st["jobs"]], JOB_COLUMNS))
        sh = st.get("sharing") or {}
        if sh.get("made_per_delivered") is not None:
            lines.append("%d jobs: %d examples made, %d delivered (%.2f made per delivered)" % (
                sh["jobs"], sh["made"], sh["delivered"], sh["made_per_delivered"]))
    for g in st.get("groups", []):
        lines.append("")
        lines.append("group %s: %s, %d of %d ranks, batch %d, %d steps, %d left over" % (
            g["name"], g["state"], g["joined"], g["world"], g["batch"], g["steps"],
            g["leftover"]))
        lines.append(table([[r["rank"], r["steps"], r["ahead"], r["ready"]] for r in g["ranks"]],
                           ["rank", "steps", "ahead", "ready"]))
    labels = st.get("labels") or {}
    for m in labels.get("maps", []):
        shown = ", ".join("%d %s (%d files)" % (c["label"], c["name"], c["files"])
                          for c in m["labels"][:LABELS_SHOWN])
        more = m["classes"] - min(len(m["labels"]), LABELS_SHOWN)
        lines.append("")
        lines.append("label map of producer%s %s: %d classes: %s%s" % (
            "s" if len(m["producers"]) > 1 else "", ", ".join(str(p) for p in m["producers"]),
            m["classes"], shown, " and %d more" % more if more > 0 else ""))
    if labels.get("omitted"):
        lines.append("(%d producers' label maps not shown)" % labels["omitted"])
    return "\n".join(lines)


def http_status(url, token, timeout):
    """The /status JSON of a broker's metrics address (http://HOST:PORT[/status])."""
    base = url.rstrip("/")
    if not base.endswith("/status"):
        base += "/status"
    req = urllib.request.Request(base)
    if token is not None:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        hint = " (give --token-file)" if e.code == 401 else ""
        raise OSError("%s: HTTP %d %s%s" % (base, e.code, e.reason, hint))
    except urllib.error.URLError as e:
        raise OSError("%s: %s" % (base, e.reason))
    except (ValueError, http.client.HTTPException) as e:
        # The broker's --listen port answers nng's header ("\\x00SP\\x00..."), not HTTP.
        raise OSError("%s: not a stoker broker's metrics address (no HTTP answer: %s); the "
                      "broker's --listen address is tcp://HOST:PORT, its --metrics "
                      "http://HOST:PORT" % (base, type(e).__name__))


def url_hint(url):
    """Why url is no address stoker speaks, with a guess, or None when it may be one."""
    schemes = ("tcp://", "tcp4://", "tcp6://", "ipc://", "inproc://", "tls+tcp://",
               "tls+tcp4://", "tls+tcp6://", "http://")
    if url.startswith(schemes):
        return None
    if url.startswith("https://"):
        return ("'%s': the broker's metrics address is plain HTTP: did you mean 'http://%s'?"
                % (url, url[len("https://"):]))
    if "://" not in url and ":" in url:
        return ("'%s' is not a URL: expected tcp://HOST:PORT, ipc:///path, tls+tcp://HOST:PORT "
                "or http://HOST:PORT (did you mean 'tcp://%s'?)" % (url, url))
    return ("'%s' is not a URL stoker speaks: expected tcp://HOST:PORT, ipc:///path, "
            "tls+tcp://HOST:PORT or http://HOST:PORT (the broker's --metrics)" % url)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m stoker.status",
                                 description="Print a stoker broker's status as a table.")
    ap.add_argument("url", help="the broker, e.g. tcp://gpu-host:7070, or its metrics address, "
                    "e.g. http://gpu-host:9090")
    ap.add_argument("--token-file", help="authenticate with the token in this file")
    ap.add_argument("--timeout", type=float, default=3.0, help="seconds to wait (default 3)")
    ap.add_argument("--json", action="store_true", help="print the raw JSON instead")
    ap.add_argument("--tls-ca", help="verify a tls+tcp:// broker with this CA (PEM)")
    ap.add_argument("--tls-cert", help="client certificate (PEM) for tls+tcp://")
    ap.add_argument("--tls-key", help="its private key (PEM)")
    ap.add_argument("--tls-insecure", action="store_true",
                    help="tls+tcp:// without verifying the broker (not safe)")
    args = ap.parse_args(argv)
    token = None
    if args.token_file:
        try:
            with open(args.token_file) as f:
                token = f.readline().rstrip()
        except OSError as e:
            ap.error("--token-file: %s" % e)
    hint = url_hint(args.url)
    if hint is not None:
        ap.error(hint)
    if args.url.startswith("http://"):
        try:
            st = http_status(args.url, token, args.timeout)
        except OSError as e:
            print("stoker.status: %s" % e, file=sys.stderr)
            return 1
        print(json.dumps(st, indent=2) if args.json else format_status(st, args.url))
        return 0
    try:
        st = status(args.url, token=token, timeout=args.timeout, tls_ca=args.tls_ca,
                    tls_cert=args.tls_cert, tls_key=args.tls_key, tls_insecure=args.tls_insecure)
    except ValueError as e:
        ap.error(str(e))
    except StokerError as e:
        print("stoker.status: %s: %s" % (args.url, e.reason), file=sys.stderr)
        return 1
    except OSError as e:
        print("stoker.status: %s" % e, file=sys.stderr)
        return 1
    print(json.dumps(st, indent=2) if args.json else format_status(st, args.url))
    return 0


if __name__ == "__main__":
    sys.exit(main())
