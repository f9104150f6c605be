"""A Griffe extension for the API reference: the docstrings' doctests shown as code.

The docstrings are written for ``help()`` and doctest: an example is a ``>>>`` line with its
continuation (``...``) and output lines, up to a blank line. Markdown would read such a block
as a paragraph (and ``[1, 2]`` in it as a link), so each one is fenced as ``pycon``.
"""

from __future__ import annotations

import griffe


def fence_doctests(text: str) -> str:
    r"""Fence every doctest block of ``text``.

    >>> fence_doctests("Sum.\n\n>>> 1 + 1\n2\n\nEnd.").splitlines()
    ['Sum.', '', '```pycon', '>>> 1 + 1', '2', '```', '', 'End.']
    """
    out: list[str] = []
    inside = False
    for line in text.splitlines():
        if not inside and line.lstrip().startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}```pycon")
            inside = True
        elif inside and not line.strip():
            out.append(f"{indent}```")
            inside = False
        out.append(line)
    if inside:
        out.append(f"{indent}```")
    return "\n".join(out)


class FenceDoctests(griffe.Extension):
    """Fence the doctests of every object's docstring."""

    def on_object(self, *, obj: griffe.Object, **kwargs: object) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence_doctests(obj.docstring.value)
