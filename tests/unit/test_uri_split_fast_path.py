"""URIs found from each "://" of a text are the ones a scan of every place finds.

``facts.split_uris`` tries URI_RE only where a scheme ends in "://", after the
end of the URI before: compared here with the plain ``sub`` and ``findall`` on
many texts, adversarial ones included (schemes inside URIs, schemes glued to a
word, trailing full stops, no character after the scheme).
"""

from __future__ import annotations

import random

import pytest

from vdoctor.memory.facts import URI_RE, split_uris

pytestmark = pytest.mark.unit

URI_PIECES = [
    "dtc", "signal", "case", "://", ":/", "/", ".", "..", "-", "@", ":", "_", "x", "P0A7F", " ", "\n", "证据",
    "sig", "nal", "d", "tc", "ca", "se", "9", "V1", "é", "K", "signal://V/x@2026-11-01T10:15:30Z", "dtc://P0A7F.",
]  # fmt: skip


def _random_text(rng: random.Random, pieces: list[str], most: int) -> str:
    return "".join(rng.choice(pieces) for _ in range(rng.randint(0, most)))


def test_uris_found_from_their_scheme_separators_are_those_of_the_plain_scan() -> None:
    rng = random.Random("uris")
    texts = [_random_text(rng, URI_PIECES, 14) for _ in range(20000)]
    texts += ["signal://a/case://b", "xsignal://a dtc://b", "dtc://", "dtc:///", "case://.x.", "a.dtc://b"]
    for text in texts:
        assert split_uris(text) == (URI_RE.sub(" ", text), URI_RE.findall(text)), text
