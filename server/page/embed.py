#!/usr/bin/env python3
"""Writes a C file that holds a file's bytes as stoker_page_html[] (and its length), so the live
page is edited as HTML (server/page/index.html) and built into the broker, never hand-escaped.
Usage: embed.py INPUT OUTPUT.c"""
import sys


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: embed.py INPUT OUTPUT.c\n")
        return 2
    with open(sys.argv[1], "rb") as f:
        data = f.read()
    lines = []
    for i in range(0, len(data), 16):
        lines.append("    " + ", ".join("0x%02x" % b for b in data[i:i + 16]) + ",")
    with open(sys.argv[2], "w") as out:
        out.write("// Generated from %s by server/page/embed.py: do not edit.\n"
                  % sys.argv[1].split("/")[-1])
        out.write("#include \"page.h\"\n\n")
        out.write("const char stoker_page_html[] = {\n%s\n    0x00,\n};\n" % "\n".join(lines))
        out.write("const size_t stoker_page_html_len = %d;\n" % len(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
