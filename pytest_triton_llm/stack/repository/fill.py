"""Fill `${name}` placeholders in config.pbtxt templates (upstream fill_template.py syntax).

Stricter than upstream: a placeholder with no value is an error, and a value of None
removes the whole line (templates keep optional parameters on one line each), so a
rendered file never carries a literal `${...}`; except, with `keep_unfilled`, a string
parameter left as upstream's fill_template.py leaves it (`"${name}"`): upstream's own python
models read such parameters by key and take the placeholder for "not set".
"""

from __future__ import annotations

import re

from ...common.errors import TritonLLMError

PLACEHOLDER = re.compile(r"\$\{(\w+)\}")


class TemplateError(TritonLLMError, ValueError):
    pass


def placeholders(template: str) -> set[str]:
    return set(PLACEHOLDER.findall(template))


def _text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


STRING_PARAMETER = re.compile(r'string_value:\s*"\$\{\w+\}"')


def fill(template: str, values: dict, name: str = "template", keep_unfilled: bool = False) -> str:
    missing = sorted(placeholders(template) - set(values))
    if missing:
        raise TemplateError(f"{name}: no value for placeholder(s) {', '.join(missing)}")
    lines = []
    for line in template.splitlines():
        keys = PLACEHOLDER.findall(line)
        if any(values[k] is None for k in keys):
            if keep_unfilled and len(keys) == 1 and STRING_PARAMETER.search(line):
                lines.append(line)
            continue
        lines.append(PLACEHOLDER.sub(lambda m: _text(values[m.group(1)]), line))
    return "\n".join(lines) + "\n"
