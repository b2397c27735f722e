"""The publish gate cannot be walked around from Python, on SQLite and PostgreSQL: a gated channel
(``production``, or one pointed ``gated=True``) takes only a version a gated channel published, unless
an override says why (kept in its history); other channels take drafts freely; publishing names the
draft it publishes when the draft holds another author's edits or has moved on."""

from __future__ import annotations

from pathlib import Path

import pytest

from convengine.catalog.errors import ErrorCode, InvalidInputError
from convengine.engine import Engine
from convengine.versions import DraftNotNamedError, GateRequiredError, PublishRefusedError
from tests.helpers import pack
from tests.versions.test_versions import WARM, warm_pack, write_tests


def test_a_refused_draft_cannot_reach_production_by_pointing_it(db_url: str, tmp_path: Path) -> None:
    with Engine.open(db_url, pack=pack(), conversation_tests=[write_tests(tmp_path)]) as engine:
        versions = engine.versions
        v1 = versions.published_version
        draft = versions.draft(warm_pack(), author="ann")
        with pytest.raises(PublishRefusedError):
            versions.publish(author="ann")
        for target in (draft.number, versions.channel("draft").version):
            with pytest.raises(GateRequiredError) as refused:
                versions.point("production", target, author="ann")
            assert refused.value.code is ErrorCode.GATE_REQUIRED
            assert f"version {draft.number}" in refused.value.message and "'production'" in refused.value.message
            assert refused.value.details == {"channel": "production", "version": draft.number,
                                             "reason": refused.value.details["reason"]}
        assert versions.published_version == v1
        assert engine.process("hello").text == "Hello there"
        assert [h["action"] for h in versions.history("production")] == ["IMPORT"]

        with pytest.raises(InvalidInputError, match="reason"):
            versions.point("production", draft.number, author="ann", override="  ")
        done = versions.point("production", draft.number, author="ann", override="outage fix, tests next")
        assert done.action == "OVERRIDE"
        assert engine.process("hello").text == WARM
        last = versions.history("production")[-1]
        assert (last["action"], last["author"], last["message"]) == ("OVERRIDE", "ann",
                                                                     "override: outage fix, tests next")


def test_staging_takes_drafts_and_production_takes_what_a_gated_channel_published(db_url: str) -> None:
    with Engine.open(db_url, pack=pack()) as engine:
        versions = engine.versions
        v1 = versions.published_version
        draft = versions.draft(warm_pack(), author="ann")
        assert versions.point("staging", draft.number, author="ann").action == "POINT"
        assert versions.channel("staging").gated is False
        with pytest.raises(GateRequiredError):  # staging took it, but no gate ran
            versions.point("production", draft.number, author="ann")
        versions.publish(author="ann", channel="staging")  # through the gate, but on an ungated channel
        with pytest.raises(GateRequiredError):
            versions.point("production", draft.number, author="ann")
        versions.publish(author="ann")
        versions.rollback(v1, author="ann")
        assert versions.point("production", draft.number, author="ann").action == "POINT"  # it passed before
        # the migration policy of production changes without moving it: no gate
        assert versions.point("production", draft.number, migration="latest", author="ops").action == "POINT"


def test_a_channel_configured_as_gated_is_gated_like_production(db_url: str) -> None:
    with Engine.open(db_url, pack=pack()) as engine:
        versions = engine.versions
        v1 = versions.published_version
        assert versions.point("canary", v1, gated=True, author="ops").action == "POINT"
        assert versions.channel("canary").gated and versions.channel("production").gated
        draft = versions.draft(warm_pack(), author="ann")
        with pytest.raises(GateRequiredError, match="'canary'"):
            versions.point("canary", draft.number, author="ann")
        with pytest.raises(GateRequiredError, match="ungating"):
            versions.point("canary", v1, gated=False, author="ann")
        with pytest.raises(InvalidInputError, match="always gated"):
            versions.point("production", v1, gated=False, author="ann", override="why not")
        with pytest.raises(GateRequiredError):  # a new channel created gated on an untested draft
            versions.point("beta", draft.number, gated=True, author="ann")
        versions.publish(author="ann", channel="canary")  # the gate ran on a gated channel
        assert versions.point("production", draft.number, author="ops").action == "POINT"
        assert engine.process("hello").text == WARM
        assert versions.point("canary", v1, gated=False, author="ops", override="canary retired").action == "OVERRIDE"
        assert versions.channel("canary").gated is False


def test_publish_names_the_draft_it_publishes(db_url: str) -> None:
    with Engine.open(db_url, pack=pack()) as engine:
        versions = engine.versions
        mine = versions.draft(warm_pack("Hi from ann"), author="ann")
        assert (versions.current_draft.number, versions.current_draft.author) == (mine.number, "ann")
        theirs = versions.edit(upsert={"ce_response": [{**pack()["ce_response"][1], "response_id": 2,
                                                        "exact_text": "Bob's loan"}]}, author="bob")
        assert theirs.parent == mine.number
        with pytest.raises(DraftNotNamedError) as unnamed:
            versions.publish(author="ann")
        assert unnamed.value.code is ErrorCode.DRAFT_NOT_NAMED and "bob" in unnamed.value.message
        assert unnamed.value.details["authors"] == ["ann", "bob"]
        with pytest.raises(DraftNotNamedError) as stale:
            versions.publish(author="ann", draft=mine.number)
        assert f"version {mine.number} is not the draft any more" in stale.value.message
        assert f"the draft is version {theirs.number} (by bob)" in stale.value.message
        with pytest.raises(InvalidInputError, match="not both"):
            versions.publish(author="ann", draft=theirs.number, version=theirs.number)
        assert engine.process("hello").text == "Hello there"

        assert versions.publish(author="ann", draft=theirs.number).version.number == theirs.number
        assert engine.process("hello").text == "Hi from ann"
        # one author's own drafts publish unnamed, as before
        versions.draft(warm_pack(), author="bob")
        assert versions.publish(author="bob").version.author == "bob"
        assert engine.process("hello").text == WARM
