"""The workers' message signer (protocol/wire.py) makes what jupyter_client's Session checks, in a fresh worker-like
interpreter that never imports jupyter_client."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nbworkers.protocol import wire


def test_the_workers_signer_makes_what_jupyter_client_checks_and_never_imports_it():
    key = wire.new_key()
    session = wire.make_session(key)

    def check(frames):  # what the kernel's relay does with what arrives
        _, frames = session.feed_identities(frames)
        return session.deserialize(frames, content=True)

    content = {"worker": 1, "gen": 0, "t": 1.5, "lines": ["é ✓\n"]}
    message = check(wire.Signer(key).frames("log", content))
    assert (message["msg_type"], message["content"]) == ("log", content)
    assert check(wire.Signer(key).frames("log", content))["content"] == content  # no replay clash
    tampered = wire.Signer(key).frames("log", content)
    tampered[-1] = tampered[-1].replace("é".encode(), b"e")
    with pytest.raises(ValueError, match="Signature"):
        check(tampered)
    with pytest.raises(ValueError, match="Signature"):
        check(wire.Signer(wire.new_key()).frames("log", content))
    code = ("import sys\nfrom nbworkers.protocol import wire\n"
            "wire.Sender('tcp://127.0.0.1:9', 'aa', 0).send('log', lines=['x'])\n"
            "print('jupyter_client' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
