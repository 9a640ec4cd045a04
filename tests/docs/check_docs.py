#!/usr/bin/env python3
"""The documentation stands alone and stays current. Four checks, each printing what is wrong:

  paths    no file of the project a user gets (README.md, docs/, scripts/, bench/, python/,
           docker/) names ../shared/ or a path into it (the development workspace's notes, which a
           clone does not have);
  links    every relative link in README.md and docs/*.md points to a file that exists, and a
           #fragment into a markdown file to one of its headings;
  options  every option a binary's --help lists is named in docs/design.md's block for that
           binary ("usage: NAME ..."), and every option named there is in its --help;
  readme   README.md is at most README_MAX_LINES lines and names no torchrun command (Debian 12's
           torchrun fails; python3 -m stoker.launch starts the ranks).

  check_docs.py ROOT [NAME=BINARY ...]   (the options check runs for the binaries given)
Exit 0 when everything holds, 1 otherwise."""
import os
import re
import subprocess
import sys

USER_PATHS = ["README.md", "docs", "scripts", "bench", "python", "docker"]
# ../shared/, ../../shared/, /work/shared, and the workspace's files by their folder.
FORBIDDEN = re.compile(
    r"(?:\.\./)+shared/|/work/shared\b|\bshared/(?:DESIGN|STYLE|TOOLCHAIN)\.md|\bshared/seed\b")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def user_files(root):
    """Files of the project under USER_PATHS (git's tracked and not ignored ones), or every file
    there outside a checkout."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard", "--"] + USER_PATHS,
                             capture_output=True, check=True, timeout=30).stdout
        files = [f for f in out.decode().split("\0") if f]
        if files:
            return files
    except (OSError, subprocess.SubprocessError):
        pass
    files = []
    for p in USER_PATHS:
        full = os.path.join(root, p)
        if os.path.isfile(full):
            files.append(p)
        for dirpath, dirnames, names in os.walk(full):
            dirnames[:] = [d for d in dirnames if d not in ("__pycache__", "out")]
            files += [os.path.relpath(os.path.join(dirpath, n), root) for n in names]
    return files


def check_paths(root):
    problems = []
    files = user_files(root)
    for rel in files:
        try:
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                lines = f.readlines()
        except OSError as e:
            problems.append(f"{rel}: cannot read: {e}")
            continue
        for n, line in enumerate(lines, 1):
            m = FORBIDDEN.search(line)
            if m:
                problems.append(f"{rel}:{n}: names '{m.group(0)}', outside the project (users "
                                "do not have it): point to docs/ instead")
    return problems, len(files)


def strip_code(text):
    """Markdown without fenced blocks and inline code spans (links in code are not links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(path):
    """GitHub's heading anchors of a markdown file."""
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"^```.*?^```", "", f.read(), flags=re.S | re.M)
    out = set()
    for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, flags=re.M):
        title = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1)).strip().lower()
        out.add(re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", title)))
    return out


def check_links(root):
    problems, count = [], 0
    docs = ["README.md"] + sorted(os.path.join("docs", f)
                                  for f in os.listdir(os.path.join(root, "docs"))
                                  if f.endswith(".md"))
    for rel in docs:
        src = os.path.join(root, rel)
        with open(src, encoding="utf-8") as f:
            text = strip_code(f.read())
        for m in LINK.finditer(text):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.I):
                continue  # http:, https:, mailto:
            count += 1
            path, _, frag = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(src), path)) if path else src
            if not os.path.abspath(dest).startswith(os.path.abspath(root) + os.sep):
                problems.append(f"{rel}: link '{target}' leaves the project")
                continue
            if not os.path.exists(dest):
                problems.append(f"{rel}: link '{target}': {os.path.relpath(dest, root)} does "
                                "not exist")
                continue
            if frag and dest.endswith(".md") and frag not in anchors(dest):
                problems.append(f"{rel}: link '{target}': no heading '#{frag}' in "
                                f"{os.path.relpath(dest, root)}")
    return problems, count


def help_block(design, name):
    """The lines of design.md's code block that starts with 'usage: NAME'."""
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", design, flags=re.S | re.M):
        if block.startswith(f"usage: {name} ") or block.startswith(f"usage: {name}\n"):
            return block
    return None


def check_options(root, binaries):
    problems = []
    with open(os.path.join(root, "docs", "design.md"), encoding="utf-8") as f:
        design = f.read()
    for name, binary in binaries:
        try:
            res = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as e:
            problems.append(f"{name} --help: cannot run {binary}: {e}")
            continue
        if res.returncode != 0:
            problems.append(f"{name} --help exited with {res.returncode}")
            continue
        block = help_block(design, name)
        if block is None:
            problems.append(f"docs/design.md has no code block starting 'usage: {name}' "
                            "(its command line)")
            continue
        helped = set(OPTION.findall(res.stdout + res.stderr))
        documented = set(OPTION.findall(block))
        for opt in sorted(helped - documented):
            problems.append(f"{name}: {opt} is in --help but not in docs/design.md's command "
                            "line: document it")
        for opt in sorted(documented - helped):
            problems.append(f"{name}: docs/design.md names {opt}, which {name} --help does not "
                            "list: remove or fix it")
    return problems


README_MAX_LINES = 160


def check_readme(root):
    with open(os.path.join(root, "README.md")) as f:
        lines = f.read().splitlines()
    problems = []
    if len(lines) > README_MAX_LINES:
        problems.append(f"README.md: {len(lines)} lines, more than {README_MAX_LINES}: move "
                        "detail to docs/")
    problems += [f"README.md:{i + 1}: a torchrun command (write python3 -m stoker.launch)"
                 for i, line in enumerate(lines) if re.search(r"^\s*torchrun\s", line)]
    return problems


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = argv[1]
    binaries = [a.split("=", 1) for a in argv[2:]]
    problems, n_files = check_paths(root)
    print(f"check_docs: paths: {n_files} files read")
    link_problems, n_links = check_links(root)
    problems += link_problems
    print(f"check_docs: links: {n_links} relative links checked")
    problems += check_readme(root)
    print("check_docs: readme: length and commands checked")
    if binaries:
        problems += check_options(root, binaries)
        print(f"check_docs: options: {', '.join(n for n, _ in binaries)} checked against "
              "docs/design.md")
    for p in problems:
        print(f"check_docs: {p}", file=sys.stderr)
    print(f"check_docs: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
