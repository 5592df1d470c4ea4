#!/usr/bin/env python3
"""Finds import circles between the modules of a crate:

    scripts/import-cycles.py [src-dir ...]       (src and core/src by default)

A module imports another when one of its top-level `use` declarations names an item of it
(`crate::`, `super::`, `self::` or a child's name). A circle (a group of modules each of which
reaches the others through imports) means no module of it can be read, tested or moved on its
own. A parent declaring its children (`mod x;`) or re-exporting their items (`pub use`, its
interface rather than what its own code uses) does not import them; `use` inside an inline
module or a function is not counted. Prints each circle and exits with 1 if there is one.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
USE = re.compile(r"^use ([^;]+);", re.M)


def module_path(src, path):
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def expand(tree):
    """The paths of a use tree: `a::{b, c::{d, e}}` gives a::b, a::c::d, a::c::e."""
    tree = re.sub(r"\s+", "", tree)
    depth, brace = 0, None
    for index, char in enumerate(tree):
        if char == "{":
            if depth == 0:
                brace = index
            depth += 1
        elif char == "}":
            depth -= 1
    if brace is None:
        return [tree]
    prefix, inner = tree[:brace], tree[brace + 1:-1]
    parts, depth, start = [], 0, 0
    for index, char in enumerate(inner):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(inner[start:index])
            start = index + 1
    parts.append(inner[start:])
    return [path for part in parts if part for path in expand(prefix + part)]


def imports(modules, module, text):
    found = set()
    for tree in USE.findall(text):
        for path in expand(tree):
            segments = path.split(" as ")[0].split("::")
            if segments[0] == "crate":
                base, segments = (), segments[1:]
            elif segments[0] in ("super", "self"):
                base = module
                while segments and segments[0] in ("super", "self"):
                    base = base[:-1] if segments[0] == "super" else base
                    segments = segments[1:]
            elif module + (segments[0],) in modules:
                base = module
            else:
                continue
            target = base
            for segment in segments:
                if target + (segment,) not in modules:
                    break
                target += (segment,)
            if target != module:
                found.add(target)
    return found


def circles(src):
    modules = {module_path(src, path): path for path in sorted(src.rglob("*.rs"))}
    edges = {module: imports(modules, module, path.read_text())
             for module, path in modules.items()}
    # Tarjan's strongly connected components.
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in edges[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted("::".join(m) or "crate" for m in component))

    for module in edges:
        if module not in index:
            visit(module)
    return found


def main(arguments):
    sources = [Path(a) for a in arguments] or [ROOT / "src", ROOT / "core" / "src"]
    failed = False
    for src in sources:
        for circle in circles(src):
            print(f"import-cycles: {src}: {' <-> '.join(circle)}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
