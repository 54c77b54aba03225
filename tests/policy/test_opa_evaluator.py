"""The packaged policies and their tests on OPA's own evaluator (its Go library), so the
claim "the same policies run on the embedded engine and on OPA" is tested, not assumed."""

from __future__ import annotations

from types import ModuleType

import pytest

from sidecar.policy.cli import collect_tests
from sidecar.policy.loader import read_bundle
from tests.helpers.opa_go import OpaGoEngine


@pytest.mark.parametrize("spec", ["builtin", "example:support"])
def test_every_rego_test_passes_on_opa(opa_bindings: ModuleType, spec: str) -> None:
    bundle = read_bundle(spec, tests=True)
    engine = OpaGoEngine(opa_bindings, bundle)
    names = [r.name for r in collect_tests(bundle)]
    assert len(names) > 20
    failed = [name for name in names if engine.value(name, None) is not True]
    assert failed == []
    on_regorus = {r.name: r.status for r in collect_tests(bundle)}
    assert set(on_regorus.values()) == {"PASS"}


def test_opa_refuses_what_check_refuses(opa_bindings: ModuleType) -> None:
    engine = opa_bindings.OpaEngine()
    engine.add_policy("p.rego", 'package sidecar\nimport rego.v1\nx if lowr(input.a) == "b"\n')
    with pytest.raises(opa_bindings.OpaError, match="undefined function lowr"):
        engine.eval_document("sidecar.x", {})
