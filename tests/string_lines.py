"""The share of test lines that are code inside string literals: fails above the limit.

A child interpreter's script belongs in a file under tests/children/, where ruff and mypy read it, not in a
string. Counted here: every line of a string literal that spans lines (adjacent pieces joined as Python joins
them, ``"a\\n" "b\\n"`` over two lines included) and whose text compiles as Python (an f-string's fields read
as a name), docstrings aside, in the test modules (tests/**/test_*.py), against all of their lines. A message
or an expected output line spread over lines is not Python and is not counted. Run by ``nox -s lint``;
``--list`` prints each module's count.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
LIMIT = 0.05
# token types that may sit between two pieces of one literal
_BETWEEN = (tokenize.NL, tokenize.COMMENT)
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)  # Python 3.12+: an f-string is several tokens
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)


def _docstring_lines(tree: ast.AST) -> set[int]:
    starts = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                    first.value.value, str):
                starts.add(first.lineno)
    return starts


Position = tuple[int, int]  # (line, column), as tokenize gives them


def _pieces(source: str) -> Iterator[tuple[bool, Position, Position]]:
    """(is a string piece, start, end) of each token, an f-string's tokens as one piece."""
    depth, first = 0, (0, 0)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == _FSTRING_START:
            first = token.start if depth == 0 else first
            depth += 1
        elif depth:
            if token.type == _FSTRING_END:
                depth -= 1
                if depth == 0:
                    yield True, first, token.end
        elif token.type == tokenize.STRING:
            yield True, token.start, token.end
        elif token.type not in _BETWEEN:
            yield False, token.start, token.end


def _is_python(segment: str) -> bool:
    """True when the literal written as ``segment`` (its pieces, as in the source) holds Python: its text, an
    f-string's fields read as a name, compiles. A message or an expected log line does not."""
    try:
        node = ast.parse(f"(\n{segment}\n)", mode="eval").body
    except SyntaxError:
        return False
    if isinstance(node, ast.Constant):
        text = node.value if isinstance(node.value, str) else ""
    elif isinstance(node, ast.JoinedStr):
        text = "".join(str(part.value) if isinstance(part, ast.Constant) else "_" for part in node.values)
    else:
        return False
    try:
        compile(text, "<literal>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def string_lines(source: str) -> set[int]:
    """The lines of ``source`` inside string literals that span lines and hold Python, docstrings aside."""
    docstrings = _docstring_lines(ast.parse(source))
    lines = source.splitlines(keepends=True)
    inside: set[int] = set()
    literal: tuple[Position, Position] | None = None
    for is_string, first, last in [*_pieces(source), (False, (0, 0), (0, 0))]:
        if is_string:
            literal = (literal[0] if literal else first, last)
            continue
        if literal and literal[1][0] > literal[0][0] and literal[0][0] not in docstrings:
            (row, col), (end_row, end_col) = literal
            segment = "".join(lines[row - 1:end_row])[col:]
            segment = segment[:len(segment) - len(lines[end_row - 1]) + end_col]
            if _is_python(segment):
                inside.update(range(row, end_row + 1))
        literal = None
    return inside


def main(argv: list[str]) -> int:
    total = strings = 0
    for path in sorted(HERE.rglob("test_*.py")):
        source = path.read_text(encoding="utf-8")
        count, lines = len(string_lines(source)), len(source.splitlines())
        total, strings = total + lines, strings + count
        if "--list" in argv and count:
            print(f"{count:5} of {lines:5}  {path.relative_to(HERE)}")
    share = strings / total if total else 0.0
    verdict = "ok" if share <= LIMIT else f"over {LIMIT:.0%}: move child scripts into tests/children/"
    print(f"test lines inside string literals: {strings} of {total} ({share:.1%}); {verdict}")
    return 0 if share <= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
