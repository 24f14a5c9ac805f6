# SPDX-License-Identifier: Apache-2.0
"""The typed stubs list exactly what the extension has, and every public entity has a docstring."""

import ast
import inspect
import pathlib
import re

import dflop
import dflop.torch
from dflop import _dflop


def stub_tree():
    path = pathlib.Path(dflop.__file__).with_name("_dflop.pyi")
    return ast.parse(path.read_text())


def public(names):
    return {name for name in names if not name.startswith("_")}


def test_stub_names_match_the_extension():
    tree = stub_tree()
    top = {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    assert public(top) == public(dir(_dflop)) - {"PathLike"}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and not issubclass(getattr(_dflop, node.name), Exception):
            members = {item.name for item in node.body if isinstance(item, ast.FunctionDef)}
            assert public(members) == public(vars(getattr(_dflop, node.name))), node.name


def described(entity):
    """The docstring without the signature lines pybind11 writes into every function's __doc__."""
    lines = (getattr(entity, "__doc__", None) or "").splitlines()
    text = [line for line in lines if not re.match(r"^(\d+\. )?\w+\(.*\)( -> .*)?$", line.strip())
            and line.strip() != "Overloaded function."]
    return "".join(text).strip()


def test_every_public_entity_has_a_docstring():
    missing = []
    for module in (dflop, dflop.torch):
        assert module.__doc__
        for name in getattr(module, "__all__", None) or public(vars(module)):
            entity = getattr(module, name)
            if inspect.ismodule(entity) or not (inspect.isclass(entity) or callable(entity)):
                continue
            if entity.__module__.split(".")[0] not in ("dflop",):
                continue
            if not described(entity):
                missing.append(f"{module.__name__}.{name}")
            if inspect.isclass(entity):
                for member, value in vars(entity).items():
                    if member.startswith("_"):
                        continue
                    if not described(value):
                        missing.append(f"{module.__name__}.{name}.{member}")
    assert missing == []


def test_the_docstring_check_sees_a_missing_one():
    assert described(dflop.Plan.to_json) and not described(dflop.Samples.__len__)
