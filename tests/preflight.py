"""Before anything is built: every Python module the checkout imports is there, and is
installed by the project's own scripts.

    /usr/bin/python3 tests/preflight.py [--venv PYTHON]

Reads deploy/python-modules.txt (module, provider, package) and checks, for Debian's
/usr/bin/python3 (with --venv, the torch venv's interpreter for the `pip` rows; with
--tf_venv, the TensorFlow venv's for the `pip-tensorflow` rows):
1. every third-party module imported by a .py file of the checkout is in the table (so a new
   import cannot pass on a machine where its package was installed by hand);
2. every package of the table is named by deploy/install-deps.sh (debian),
   deploy/requirements-torch.txt (pip) or deploy/requirements-tensorflow.txt (pip-tensorflow);
3. every module of the table imports.
Each failure names the module, the file that imports it and the package that provides it.
Imports under `try: ... except ImportError` are optional and not required; an import of a
module the code generates itself says so with a `# preflight: generated` comment.
"""

import argparse
import ast
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TABLE = ROOT / "deploy" / "python-modules.txt"
INSTALLERS = {"debian": ROOT / "deploy" / "install-deps.sh", "pip": ROOT / "deploy" / "requirements-torch.txt",
              "pip-tensorflow": ROOT / "deploy" / "requirements-tensorflow.txt"}
SKIP_DIRS = {".git", "third_party"}


def read_table():
    table = {}
    for line in TABLE.read_text().splitlines():
        line = line.split("#", 1)[0].split()
        if line:
            module, provider, package = line
            table.setdefault(module, []).append((provider, package))
    return table


def _optional_nodes(tree):
    """The import statements inside a try whose handlers catch ImportError (or everything)."""
    optional = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        caught = [ast.unparse(h.type) if h.type else "Exception" for h in node.handlers]
        if any(re.search(r"ImportError|ModuleNotFoundError|Exception", c) for c in caught):
            optional.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return optional


def imports(path):
    """Yields the top-level names of the modules `path` imports unconditionally."""
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text, str(path))
    optional = _optional_nodes(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        if id(node) not in optional and "preflight: generated" not in lines[node.lineno - 1]:
            yield from (n.split(".")[0] for n in names)


def python_files():
    for path in sorted(ROOT.rglob("*.py")):
        if not SKIP_DIRS.intersection(path.relative_to(ROOT).parts):
            yield path


def local_modules(files):
    names = {p.stem for p in files} | {p.parent.name for p in files if p.name == "__init__.py"}
    return names | {"_generated"}


def check_table_coverage(table):
    errors = []
    files = list(python_files())
    local = local_modules(files)
    for path in files:
        for module in imports(path):
            if module in sys.stdlib_module_names or module in local or module in table:
                continue
            errors.append(f"{path.relative_to(ROOT)} imports '{module}', which deploy/python-modules.txt "
                          "does not list: add the package that provides it there and to its installer")
    return sorted(set(errors))


def check_installers(table):
    texts = {provider: path.read_text() if path.exists() else "" for provider, path in INSTALLERS.items()}
    errors = []
    for module, rows in table.items():
        for provider, package in rows:
            if provider not in texts:
                errors.append(f"deploy/python-modules.txt: '{module}' has an unknown provider '{provider}'")
            elif not re.search(rf"(^|\s){re.escape(package)}(\s|==|$)", texts[provider], re.M):
                errors.append(f"'{module}' comes from the {provider} package '{package}', which "
                              f"{INSTALLERS[provider].relative_to(ROOT)} does not install")
    return errors


def check_imports(table, python, provider):
    errors = []
    for module, rows in sorted(table.items()):
        packages = [p for prov, p in rows if prov == provider]
        if not packages:
            continue
        run = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True)
        if run.returncode != 0:
            last = (run.stderr.strip().splitlines() or ["?"])[-1]
            errors.append(f"{python} cannot import '{module}' ({last}): it comes from the {provider} "
                          f"package '{packages[0]}'; run deploy/install-deps.sh")
    return errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--venv", help="the torch venv's python: check the table's pip rows there too")
    parser.add_argument("--tf_venv", help="the TensorFlow venv's python: check the pip-tensorflow rows there")
    args = parser.parse_args()
    table = read_table()
    errors = check_table_coverage(table) + check_installers(table)
    errors += check_imports(table, "/usr/bin/python3", "debian")
    if args.venv:
        errors += check_imports(table, args.venv, "pip")
    if args.tf_venv:
        errors += check_imports(table, args.tf_venv, "pip-tensorflow")
    for e in errors:
        print(f"preflight: {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"preflight: {len(table)} Python modules present, each installed by the project's scripts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
