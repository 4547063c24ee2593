"""Every policy constant says why it is what it is (issue 12: no unexplained numbers)."""

from __future__ import annotations

import ast
import inspect

from poolpilot.policy import params


def test_every_policy_param_has_a_docstring() -> None:
    cls = next(
        n
        for n in ast.parse(inspect.getsource(params)).body
        if isinstance(n, ast.ClassDef) and n.name == "PolicyParams"
    )
    missing = []
    for i, node in enumerate(cls.body):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            nxt = cls.body[i + 1] if i + 1 < len(cls.body) else None
            doc = nxt.value.value if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) else ""
            if not isinstance(doc, str) or len(doc.split()) < 5:
                missing.append(node.target.id)
    assert not missing, f"PolicyParams fields without a docstring saying why: {missing}"
