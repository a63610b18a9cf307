"""Ray's TLS as a Ray run's security fact (magics/backends/ray/nodes/tls.py): the kernel's environment and each node's, the
fact in ``%workers``' isolation column, and what the first Ray run of a kernel says in its cell."""

from __future__ import annotations

import pytest

from nbworkers.magics.backends import isolation
from nbworkers.magics.backends.ray.nodes import tls

FILES = {"RAY_TLS_SERVER_CERT": "/c/cert.pem", "RAY_TLS_SERVER_KEY": "/c/key.pem", "RAY_TLS_CA_CERT": "/c/ca.pem"}


@pytest.mark.parametrize("environ, on, why", [
    ({}, False, "RAY_USE_TLS is not set"),
    ({"RAY_USE_TLS": "0", **FILES}, False, "RAY_USE_TLS is not set"),
    ({"RAY_USE_TLS": "1"}, False, "RAY_TLS_SERVER_CERT, RAY_TLS_SERVER_KEY, RAY_TLS_CA_CERT are not"),
    ({"RAY_USE_TLS": "true", **FILES, "RAY_TLS_CA_CERT": ""}, False, "RAY_TLS_CA_CERT is not"),
    ({"RAY_USE_TLS": "1", **FILES}, True, ""),
    ({"RAY_USE_TLS": "True", **FILES}, True, ""),
])
def test_one_environment_asks_for_tls_only_with_its_three_files(environ, on, why):
    found = tls.tls_of(environ)
    assert found[0] is on and why in found[1]


def test_the_fact_is_on_only_when_the_kernel_and_every_node_have_it():
    kernel = {"RAY_USE_TLS": "1", **FILES}
    nodes = [{"ip": "127.0.0.2", "ray_tls": [True, ""]}, {"ip": "127.0.0.3", "ray_tls": [True, ""]}]
    assert tls.ray_tls_fact(kernel, nodes) == "on"
    plain = [nodes[0], {"ip": "127.0.0.3", "ray_tls": [False, "RAY_USE_TLS is not set"]}]
    assert tls.ray_tls_fact(kernel, plain) == "off (node 127.0.0.3: RAY_USE_TLS is not set)"
    assert tls.ray_tls_fact({}, nodes) == "off (the kernel: RAY_USE_TLS is not set)"


@pytest.mark.parametrize("place", [
    {"ip": "10.0.0.9"},  # an older actor that does not say
    {"ip": "10.0.0.9", "ray_tls": None},
    {"ip": "10.0.0.9", "ray_tls": [1, ""]},  # not a bool: not a yes
    {"ip": "10.0.0.9", "ray_tls": ["yes", ""]},
    {"ip": "10.0.0.9", "ray_tls": [True]},
    {"ip": "10.0.0.9", "ray_tls": "on"},
])
def test_a_node_that_does_not_say_counts_as_off_and_the_cell_says_so(place, monkeypatch, capsys):
    kernel = {"RAY_USE_TLS": "1", **FILES}
    fact = tls.ray_tls_fact(kernel, [{"ip": "127.0.0.2", "ray_tls": [True, ""]}, place])
    assert fact == "off (node 10.0.0.9: the node did not say)"
    assert isolation.isolation_text({"mode": "off", "reason": "r", "ray_tls": fact}).endswith(
        "Ray's TLS: off (node 10.0.0.9: the node did not say)")
    monkeypatch.setattr(tls, "_said", False)
    tls.say_once(fact)
    said = capsys.readouterr().err
    assert "Ray's transport is not encrypted: TLS is off (node 10.0.0.9: the node did not say)" in said
    assert "Ray runs with TLS" not in said


def test_workers_column_and_the_cell_say_it_once(monkeypatch, capsys):
    fact = {"mode": "off", "reason": "Ray nodes: ...", "ray_tls": "off (the kernel: RAY_USE_TLS is not set)"}
    assert isolation.isolation_text(fact) == ("off (Ray nodes: ...); Ray's TLS: off (the kernel: RAY_USE_TLS is not "
                                              "set)")
    monkeypatch.setattr(tls, "_said", False)
    tls.say_once(fact["ray_tls"])
    tls.say_once(fact["ray_tls"])
    said = capsys.readouterr().err
    assert said.count("nbworkers: Ray's transport is not encrypted") == 1
    assert "plain text" in said and "RAY_USE_TLS=1" in said and 'docs/ray.md, "Ray with TLS"' in said
    monkeypatch.setattr(tls, "_said", False)
    tls.say_once("on")
    assert "Ray runs with TLS here" in capsys.readouterr().err


def test_a_ray_backend_records_its_transport_once_placed():
    from nbworkers.magics.backends.ray.backend import RayBackend

    backend = RayBackend(address="127.0.0.1:1")
    assert "ray_tls" not in isolation.isolation_fact(backend)  # not placed yet: not known
    backend.ray_tls = "on"
    assert isolation.isolation_fact(backend)["ray_tls"] == "on" and isolation.isolation_fact(backend)["mode"] == "off"
