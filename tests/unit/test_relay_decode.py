"""The relay's own parsing of a checked message (magics/run/relay.py decode): no kernel, no worker process."""

from __future__ import annotations

import hashlib
import hmac

from nbworkers.magics.run.relay import RelayReceiver
from nbworkers.protocol import wire


def signed(key: str, parts: list[bytes]) -> list[bytes]:
    digest = hmac.new(key.encode("ascii"), digestmod=hashlib.sha256)
    for part in parts:
        digest.update(part)
    return [wire.Signer.DELIM, digest.hexdigest().encode("ascii"), *parts]


def test_a_signed_message_is_parsed_once_and_a_replay_dropped():
    key = wire.new_key()
    relay = RelayReceiver(key, replay_history=3)
    try:
        frames = wire.Signer(key).frames("metrics", {"worker": 2, "gen": 0, "t": 1.0, "metrics": {"loss": "nan"},
                                                     "step": 5})
        message = relay.decode(frames)
        assert message is not None and message.kind == "metrics" and message.content["step"] == 5
        assert message.content["metrics"]["loss"] != message.content["metrics"]["loss"]  # "nan" is a float again
        assert relay.decode(frames) is None and relay.drops.bad_signature == 1  # the same signature: a replay
        for step in range(5):  # the history keeps the newest 3 signatures
            relay.decode(wire.Signer(key).frames("status", {"worker": 0, "gen": 0, "state": "running", "t": step}))
        assert len(relay._session.digest_history) == 3
    finally:
        relay.close()


def test_signed_garbage_is_dropped_as_malformed():
    key = wire.new_key()
    relay = RelayReceiver(key)
    try:
        not_json = signed(key, [b'{"msg_type": "log"}', b"{}", b"{}", b"\xff not json"])
        not_a_header = signed(key, [b'["log"]', b"{}", b"{}", b'{"worker": 0, "gen": 0, "lines": []}'])
        unknown_kind = signed(key, [b'{"msg_type": "exec"}', b"{}", b"{}", b'{"worker": 0, "gen": 0}'])
        assert [relay.decode(f) for f in (not_json, not_a_header, unknown_kind)] == [None, None, None]
        assert relay.drops.malformed == 3 and relay.received == 0
        good = signed(key, [b'{"msg_type": "log"}', b"{}", b"{}", b'{"worker": 0, "gen": 0, "lines": ["hi\\n"]}'])
        assert relay.decode(good).content["lines"] == ["hi\n"]
    finally:
        relay.close()
