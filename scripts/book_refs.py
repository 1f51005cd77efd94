#!/usr/bin/env python3
"""Numbers in the book's prose, read from the data the figures and blocks are made from.

A sentence that quotes a measurement writes a reference instead of the number:

    prefill reaches {{#kvlab bench.json:prefill[prompt_len=512].tok_s:.0f}} tokens/s

and this file replaces it by the value, formatted: `582`. The parts, split on `:`:

    FILE    a file of book/src/figures/data/ (`.json`, or `.jsonl`: a list of its lines)
    EXPR    a path into it, or arithmetic (+ - * / and parentheses) on several paths and
            numbers: `prefill[prompt_len=512].ttft_ms / prefill[prompt_len=16].ttft_ms`
    FORMAT  optional, a Python format spec: `.1f`, `,.0f`, `.0%` (default: the value as is)

A path is names joined by `.`, with `[N]` for the N-th element of a list (from 0) and
`[key=value]` for the one element of a list of objects whose `key` is `value` (compared as
text, so `[prompt_len=512]` and `[policy=int8]` both work). A `.jsonl` file starts with a
list: `bench_dtypes.jsonl:[dtype=int8].prefill[0].tok_s` takes the first line whose `dtype`
is `int8` (when several match, the first is taken only with `[key=value,first]`; otherwise
it is an error, so that a new line in the file cannot silently change a quoted number).

Any problem (no such file, no such key, no match, several matches, a value that is not a
number where arithmetic or a numeric format needs one) is an error naming the page and the
reference, and fails the book build.

Two uses:
    python3 scripts/book_refs.py supports html    # mdBook's preprocessor protocol (book.toml)
    python3 scripts/book_refs.py < [context, book] JSON > book JSON
and, as a module, `expand(text, page)` for scripts/check-book-prose.py, which checks every
reference of every page without mdBook.

`\\{{#kvlab ...}}` (a backslash before it) is left alone and shown as written (mdBook's links
preprocessor, which runs after this one, removes the backslash), so a page can show the
syntax itself.
"""
import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "book" / "src" / "figures" / "data"

# `{{#kvlab FILE:EXPR[:FORMAT]}}`, not preceded by a backslash.
REF = re.compile(r"(?<!\\)\{\{#kvlab\s+([^}]*?)\s*\}\}")
PATH_TOKEN = re.compile(r"(?:\[[^\]]*\]|[A-Za-z_]\w*)(?:\.[A-Za-z_]\w*|\[[^\]]*\])*")
FORMAT = re.compile(r"^[<>=^]?[+\- ]?#?0?\d*[,_]?(?:\.\d+)?[bcdeEfFgGnosxX%]?$")


class RefError(Exception):
    pass


_cache = {}


def load(name: str, data_dir: Path = DATA):
    key = (str(data_dir), name)
    if key not in _cache:
        path = data_dir / name
        if "/" in name or not path.is_file():
            raise RefError(f"no data file {name} in {data_dir.relative_to(ROOT) if data_dir.is_relative_to(ROOT) else data_dir}")
        text = path.read_text()
        try:
            if name.endswith(".jsonl"):
                _cache[key] = [json.loads(line) for line in text.splitlines() if line.strip()]
            else:
                _cache[key] = json.loads(text)
        except json.JSONDecodeError as e:
            raise RefError(f"{name} is not valid JSON: {e}")
    return _cache[key]


def walk(value, path: str):
    """Follows one path (`steps[context=512].cached_ms`) into a loaded JSON value."""
    parts = re.findall(r"\[([^\]]*)\]|\.?([A-Za-z_]\w*)", path)
    done = ""
    for index, name in parts:
        if name:
            done += ("." if done else "") + name
            if not isinstance(value, dict) or name not in value:
                have = ", ".join(sorted(value)) if isinstance(value, dict) else type(value).__name__
                raise RefError(f"no key `{name}` at `{done}` (there: {have})")
            value = value[name]
            continue
        done += f"[{index}]"
        if not isinstance(value, list):
            raise RefError(f"`{done}` indexes a {type(value).__name__}, not a list")
        if re.fullmatch(r"\d+", index):
            i = int(index)
            if i >= len(value):
                raise RefError(f"`{done}`: the list has {len(value)} elements")
            value = value[i]
            continue
        m = re.fullmatch(r"\s*(\w+)\s*=\s*([^,\]]*?)\s*(,\s*first)?\s*", index)
        if not m:
            raise RefError(f"`{done}`: write [N] or [key=value]")
        key, wanted, first = m.groups()
        found = [v for v in value if isinstance(v, dict) and key in v and _same(v[key], wanted)]
        if not found:
            seen = sorted({str(v.get(key)) for v in value if isinstance(v, dict)})
            raise RefError(f"`{done}`: no element with {key} = {wanted} (there: {', '.join(seen) or 'none'})")
        if len(found) > 1 and not first:
            raise RefError(f"`{done}`: {len(found)} elements have {key} = {wanted}; add `,first` or narrow it")
        value = found[0]
    return value


def _same(have, wanted: str) -> bool:
    if isinstance(have, bool):
        return str(have).lower() == wanted.lower()
    if isinstance(have, (int, float)):
        try:
            return float(have) == float(wanted)
        except ValueError:
            return False
    return str(have) == wanted


def evaluate(spec: str, data_dir: Path = DATA):
    """The value of one reference's text (what is between `{{#kvlab` and `}}`), formatted."""
    parts = spec.split(":")
    if len(parts) < 2:
        raise RefError("write {{#kvlab FILE:PATH[:FORMAT]}}")
    name, fmt = parts[0].strip(), None
    if len(parts) > 2 and FORMAT.match(parts[-1].strip()):
        fmt = parts[-1].strip()
        parts = parts[:-1]
    expr = ":".join(parts[1:]).strip()
    if not expr:
        raise RefError("no path after the file name")
    data = load(name, data_dir)

    values = []

    def substitute(m):
        token = m.group(0)
        if re.fullmatch(r"\d+(?:\.\d+)?(?:e-?\d+)?", token):
            return token
        values.append(walk(data, token))
        return f"_v{len(values) - 1}"

    # Numbers first (so that `2` or `1e3` stay numbers), then paths.
    code = re.sub(r"\d+(?:\.\d+)?(?:e-?\d+)?|" + PATH_TOKEN.pattern, substitute, expr)
    if code == "_v0":
        value = values[0]
    else:
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise RefError(f"arithmetic on a value that is not a number: {v!r}")
        try:
            value = _arith(ast.parse(code, mode="eval").body, values)
        except SyntaxError:
            raise RefError(f"cannot read `{expr}` as a path or as arithmetic on paths")
    if fmt is None:
        if isinstance(value, (dict, list)):
            raise RefError(f"`{expr}` is a {type(value).__name__}, not a value")
        return str(value).lower() if isinstance(value, bool) else str(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RefError(f"format `{fmt}` needs a number; `{expr}` is {value!r}")
    try:
        return format(value, fmt)
    except ValueError as e:
        raise RefError(f"format `{fmt}`: {e}")


def _arith(node, values):
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        a, b = _arith(node.left, values), _arith(node.right, values)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if b == 0:
            raise RefError("division by zero")
        return a / b
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_arith(node.operand, values)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.Name) and re.fullmatch(r"_v\d+", node.id):
        return values[int(node.id[2:])]
    raise RefError("only + - * / and parentheses are allowed between paths")


def expand(text: str, page: str, data_dir: Path = DATA):
    """`text` with every reference replaced by its value, and the list of problems, one
    line each: `PAGE: {{#kvlab SPEC}}: PROBLEM`."""
    problems = []

    def one(m):
        try:
            return evaluate(m.group(1), data_dir)
        except RefError as e:
            problems.append(f"{page}: {{{{#kvlab {m.group(1)}}}}}: {e}")
            return m.group(0)

    return REF.sub(one, text), problems


def _chapters(items):
    for item in items:
        if isinstance(item, dict) and "Chapter" in item:
            chapter = item["Chapter"]
            yield chapter
            yield from _chapters(chapter.get("sub_items", []))


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "supports":
        return 0  # plain Markdown in, plain Markdown out: every renderer
    context, book = json.load(sys.stdin)
    root = Path(context.get("root", ROOT / "book"))
    src = root / context.get("config", {}).get("book", {}).get("src", "src")
    data_dir = src / "figures" / "data"
    problems = []
    # mdBook 0.5 serializes a book as {"items": [...]}, 0.4 as {"sections": [...]}.
    for chapter in _chapters(book.get("items", book.get("sections", []))):
        if chapter.get("content") is None:
            continue
        page = f"book/src/{chapter.get('source_path') or chapter.get('path')}"
        chapter["content"], found = expand(chapter["content"], page, data_dir)
        problems += found
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    if problems:
        return 1
    json.dump(book, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
