"""Runs ON a host, with the host's interpreter (stdlib only): verl's config files, read
without importing verl (it imports torch).

    python -c SOURCE manifest SPEC_JSON
    python -c SOURCE files SPEC_JSON MAX_BYTES

SPEC_JSON: {"yaml": [folders under the verl package], "py": [folders or files],
"py_tree": [folders whose .py files are read with their subpackages']}. Answer: one
JSON line on stdout. `manifest`: {"version", "root", "python", "files": [[rel, size, mtime]]};
`files`: the same plus "tar_b64", a gzip tar of exactly those files, or {"error": why}.
Nothing is written on the host.
"""

import base64
import importlib.util
import io
import json
import os
import sys
import tarfile


def _fail(message):
    print(json.dumps({"error": " ".join(str(message).split())[:500]}))
    sys.exit(0)


def _locate():
    try:
        spec = importlib.util.find_spec("verl")  # a top-level name: nothing is imported
    except (ImportError, ValueError) as exc:
        _fail(f"verl cannot be located: {exc}")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        if os.path.isfile(os.path.join(loc, "trainer", "config", "ppo_trainer.yaml")):
            return os.path.realpath(loc)
    _fail("verl is not installed there")


def _version(root):
    # verl's own __version__ is this file's text; the distribution's metadata is the fallback.
    try:
        with open(os.path.join(root, "version", "version"), encoding="utf-8") as fh:
            text = fh.read().strip()
        if text:
            return text
    except OSError:
        pass
    try:
        import importlib.metadata as metadata

        return metadata.version("verl")
    except Exception:  # no metadata: the cockpit reports "unknown"
        return None


def _files(root, spec):
    out = []
    seen = set()

    def add(path):
        rel = os.path.relpath(path, root)
        if rel in seen or rel.startswith(".."):
            return
        seen.add(rel)
        st = os.stat(path)
        out.append([rel.replace(os.sep, "/"), st.st_size, int(st.st_mtime)])

    for kind, suffix in (("yaml", ".yaml"), ("py", ".py"), ("py_tree", ".py")):
        for entry in spec.get(kind, []):
            path = os.path.join(root, entry)
            if os.path.isfile(path) and path.endswith(suffix):
                add(path)
                continue
            for folder, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
                for name in sorted(names):
                    full = os.path.join(folder, name)
                    if name.endswith(suffix) and os.path.isfile(full):
                        add(full)
                if kind == "py":  # dataclass folders: their own files, not subpackages
                    dirs[:] = []
    return sorted(out)


def main(argv):
    if len(argv) < 2 or argv[0] not in ("manifest", "files"):
        _fail("usage: manifest|files SPEC_JSON [MAX_BYTES]")
    try:
        spec = json.loads(argv[1])
    except ValueError:
        _fail("bad SPEC_JSON")
    root = _locate()
    files = _files(root, spec)
    answer = {"version": _version(root), "root": root, "python": sys.executable, "files": files}
    if argv[0] == "files":
        limit = int(argv[2]) if len(argv) > 2 else 16 << 20
        total = sum(size for _, size, _ in files)
        if total > limit:
            _fail(f"verl's config files are {total} bytes, more than the {limit} allowed")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for rel, _, _ in files:
                info = tar.gettarinfo(os.path.join(root, rel), arcname=rel)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                with open(os.path.join(root, rel), "rb") as fh:
                    tar.addfile(info, fh)
        answer["tar_b64"] = base64.b64encode(buf.getvalue()).decode("ascii")
    sys.stdout.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
