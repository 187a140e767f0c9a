#!/usr/bin/python3
"""Every command the README and docs show exists: files and folders of the repository,
Bazel targets, and the flags given to OmniLearn's programs.

Checked in README.md, docs/*.md and deploy/README.md:
- a path under one of the repository's top folders (`deploy/quickstart.sh`, `docs/gpu.md`,
  `bench/gpu/`) is a file or folder of the checkout;
- a Bazel label (`//controller:simulate`, `bazel-bin/server/omnilearn_server`) names a
  target of its package's BUILD file, or a file in the package;
- in a code block, a flag given to a binary (omnilearn_server, omnilearn_worker,
  omnilearn_ctl, //controller:simulate) is one that binary lists in --helpfull; a flag given
  to a script of the repository (`bench/peers.py`, `python -m omnilearn.run`,
  `tests/cluster.sh`) is written in that script;
- a flag in the prose (`--lease_s`) is one of some OmniLearn program;
- docs/ARCHITECTURE.md's table of the server's folders agrees with their BUILD files: every
  package a folder's libraries depend on is one its row says it may use;
- tools/docs_gen.py's rules: every generated table (the figures from bench/results/, the flags
  from --helpfull) is what its source makes now, a figure in the prose is one of those tables'
  cells, pages keep their length, no dates, hashes or issue numbers, no fragments.
Usage: docs_test.py README SERVER WORKER CTL SIMULATE: the checkout's README.md (its real path
is the checkout's root: Bazel's runfiles link to the sources) and the four binaries, built."""

import os
import re
import sys

# The checkout's tools/docs_gen.py (runfiles link to the sources): its --helpfull parser, the
# tables, their sources and the pages' rules.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "tools"))
import docs_gen  # noqa: E402

TOP = ("proto", "controller", "common", "server", "worker", "python", "tools", "deploy", "bench",
       "tests", "docs", "third_party", ".ci")
PATH_RE = re.compile(r"(?<![\w./~-])(?:\./)?((?:%s)/[\w.+/-]*)" % "|".join(re.escape(t) for t in TOP))
LABEL_RE = re.compile(r"(?<![\w@:])//([\w/.-]*)(?::([\w.+/-]+))?")
BAZEL_BIN_RE = re.compile(r"bazel-bin/([\w/-]+)/([\w.-]+)")
FLAG_RE = re.compile(r"(?<![\w-])--([a-z][a-z0-9_]*)")
BINARIES = ("omnilearn_server", "omnilearn_worker", "omnilearn_ctl", "simulate")


def doc_files(root):
    files = ["README.md", "CHANGELOG.md", "deploy/README.md"]
    files += sorted("docs/" + f for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md"))
    return files


def helpfull_flags(binary):
    """A binary's flags as --helpfull lists them (tools/docs_gen.py parses it), and their negations."""
    flags = {flag for _, flag, _, _ in docs_gen.parse_helpfull(binary)}
    builtin = {"help", "helpfull", "helpshort", "helppackage", "version", "only_check_args"}
    return flags | builtin | {"no" + f for f in flags}  # absl's negated booleans


def code_blocks(text):
    """(code, prose) of a Markdown page: fenced blocks' lines, and the rest."""
    code, prose, fenced = [], [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
            continue
        (code if fenced else prose).append(line)
    return "\n".join(code).replace("\\\n", " "), "\n".join(prose)


def inline_code(prose):
    return re.findall(r"`([^`\n]+)`", prose)


class Checker:
    def __init__(self, root, binaries):
        self.root = root
        self.flags = {name: helpfull_flags(path) for name, path in zip(BINARIES, binaries)}
        self.problems = []

    def exists(self, rel):
        return os.path.exists(os.path.join(self.root, rel))

    def exists_or_stem(self, rel):
        """A file or folder, or the stem of files (`server/rpc/slice_service`: its .h and .cc)."""
        if self.exists(rel):
            return True
        folder, stem = os.path.split(os.path.join(self.root, rel))
        return os.path.isdir(folder) and any(f.startswith(stem + ".") for f in os.listdir(folder))

    def check_path(self, where, path):
        path = path.rstrip(".,;:)")
        if any(c in path for c in "<>*{}$") or path.endswith(".."):
            return
        if not self.exists_or_stem(path):
            self.problems.append(f"{where}: no such file or folder: {path}")

    def check_label(self, where, package, name):
        if package.endswith("...") or name in (None, "all", "*") and package.endswith("/..."):
            return
        build = os.path.join(package, "BUILD")
        if not self.exists(build):
            self.problems.append(f"{where}: no Bazel package //{package}")
            return
        if name is None or name == "all":
            return
        with open(os.path.join(self.root, build)) as f:
            text = f.read()
        # A target's name, also where a macro's list names it ("shards_test"), or a file.
        if f'"{name}"' not in text and not self.exists(os.path.join(package, name)):
            self.problems.append(f"{where}: no target //{package}:{name}")

    def script_flags(self, script):
        """The text of a script of the repository (a module: its package's files)."""
        if script.startswith("omnilearn."):
            path = os.path.join("python", *script.split(".")) + ".py"
        else:
            path = script
        if not self.exists(path):
            return None
        with open(os.path.join(self.root, path)) as f:
            return f.read()

    def check_command(self, where, command):
        """One shell command: the flags after each OmniLearn program are that program's."""
        unquoted = re.sub(r"\"[^\"]*\"|'[^']*'", "", command).replace("`", " ")
        program, text = None, None
        for token in unquoted.split():
            m = FLAG_RE.match(token)
            if m and program not in (None, "python -m"):
                flag = m.group(1)
                known = flag in self.flags[program] if text is None else f"--{flag}" in text or f'"{flag}"' in text
                if not known:
                    self.problems.append(f"{where}: {program} has no flag --{flag}: {command.strip()[:100]}")
                continue
            base = os.path.basename(token.rstrip(";"))
            if base in BINARIES[:3] or token == "//controller:simulate":
                program, text = ("simulate" if token.startswith("//") else base), None
            elif re.match(r"^(\./)?[\w/.-]+\.(py|sh)$", token) and self.exists(token.lstrip("./") if token.startswith("./") else token):
                program, text = token, self.script_flags(token.lstrip("./") if token.startswith("./") else token)
            elif program == "python -m":
                program, text = None, None  # another module than OmniLearn's: not checked
                if token.startswith("omnilearn."):
                    program, text = token.rstrip(".,;:)"), self.script_flags(token.rstrip(".,;:)"))
                    if text is None:
                        self.problems.append(f"{where}: no module {token}")
                        program = None
            elif token == "-m":
                program, text = "python -m", None
            elif token in ("&&", "||", "|", ";") or token.startswith("#"):
                program = None
                if token.startswith("#"):
                    break

    def all_flags(self):
        flags = set().union(*self.flags.values())
        for folder, _, files in os.walk(self.root):
            if "/." in folder or "bazel-" in folder:
                continue
            for f in files:
                if f.endswith((".py", ".sh")) or f in ("run",):
                    with open(os.path.join(folder, f), errors="replace") as fh:
                        flags |= set(FLAG_RE.findall(fh.read()))
        return flags

    def check_page(self, page, known_flags):
        with open(os.path.join(self.root, page)) as f:
            text = f.read()
        code, prose = code_blocks(text)
        for n, line in enumerate(text.split("\n"), 1):
            where = f"{page}:{n}"
            for path in [] if "kubectl " in line else PATH_RE.findall(line):  # kubectl's are resources
                self.check_path(where, path)
            for package, name in LABEL_RE.findall(line):
                self.check_label(where, package, name or None)
            for package, name in BAZEL_BIN_RE.findall(line):
                self.check_label(where, package, name)
        for line in code.split("\n"):
            for command in re.split(r"&&|\|\||;", line):
                self.check_command(page, command)
        for span in inline_code(prose):
            if re.search(r"omnilearn_(server|worker|ctl)\b|\.(py|sh)\b|-m omnilearn", span):
                self.check_command(page, span)
                continue
            if span.startswith("bazel "):  # Bazel's own flags, before any " -- "
                span = span.partition(" -- ")[2]
            for flag in FLAG_RE.findall(span):
                if flag not in known_flags:
                    self.problems.append(f"{page}: `{span}`: no OmniLearn program has --{flag}")


def allowed_by_table(text):
    """docs/ARCHITECTURE.md's "may use" column: {"//server/x": {"//pkg", ...}}."""
    rows = re.findall(r"^\| `server/(\w+)/` \| .*? \| (.*?) \|$", text, re.M)
    allowed, above = {}, set()
    for folder, may_use in rows:
        packages = set()
        if "everything" in may_use:
            packages = {"*"}
        if "all of the above" in may_use:
            packages |= above | set().union(*allowed.values())
        for used in re.findall(r"`(\w+)/", may_use):
            packages.add(("//server/" if used in SERVER_FOLDERS else "//") + used)
        allowed["//server/" + folder] = packages
        above.add("//server/" + folder)
    return allowed


SERVER_FOLDERS = ("control", "data", "checkpoint", "rpc", "daemon")


def build_dependencies(build_text):
    """The packages a BUILD file's libraries and binaries depend on (tests and visibility aside)."""
    packages = set()
    for kind, body in re.findall(r"^(\w+)\(\n(.*?)^\)", build_text, re.M | re.S):
        if kind.endswith("_test") or kind == "package_group":
            continue
        body = re.sub(r"visibility = \[.*?\]", "", body, flags=re.S)
        packages |= set(re.findall(r'"(//[\w/]+)(?::[^"]*)?"', body))
    return packages


def check_architecture(root, problems):
    with open(os.path.join(root, "docs/ARCHITECTURE.md")) as f:
        allowed = allowed_by_table(f.read())
    if set(allowed) != {"//server/" + f for f in SERVER_FOLDERS}:
        problems.append(f"docs/ARCHITECTURE.md: the table names {sorted(allowed)}, not the server's folders")
    for package, may_use in allowed.items():
        with open(os.path.join(root, package[2:], "BUILD")) as f:
            used = build_dependencies(f.read()) - {package, "//third_party"}
        if "*" in may_use:
            continue
        for dep in sorted(used - may_use - {"//common"}):
            problems.append(f"docs/ARCHITECTURE.md: {package} depends on {dep}, which its row does not allow")


def main():
    root, binaries = os.path.dirname(os.path.realpath(sys.argv[1])), sys.argv[2:6]
    checker = Checker(root, binaries)
    known = checker.all_flags()
    pages = doc_files(root)
    for page in pages:
        checker.check_page(page, known)
    check_architecture(root, checker.problems)
    checker.problems += docs_gen.check(binaries[:3], root)
    for problem in checker.problems:
        print(problem)
    print(f"docs_test: {len(pages)} pages, {len(checker.problems)} problems")
    sys.exit(1 if checker.problems else 0)


if __name__ == "__main__":
    main()
