"""Small talk, scored before intents (the first stage of intent matching after the welcome event).

Intents named in ``flows.small-talk-intents`` are small-talk topics (greetings, thanks, "how are
you"); their ``ce_intent_classifier`` rows are scored before every other intent's. A row's score is
the share of the message's letters and digits its match covers (EXACT and a SEMANTIC hit: 1.0).
At or above ``flows.small-talk-min-score`` the topic wins outright (``INTENT_SMALL_TALK_MATCHED``,
``strong``); below it the topic only wins when no other intent's classifier matches, so "hi, I
want a loan" is the loan intent. The remaining stages are the existing ones: the other classifiers
(substring and pattern match on training phrases), the LLM intent matcher when they miss, the
knowledge fallback when no intent matched, then the fallback intent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from convengine._internal.textmatch import RegexTimeoutError
from convengine.catalog import stages
from convengine.config.records import ClassifierRecord
from convengine.nodes.turn import Turn


@dataclass(frozen=True, slots=True)
class SmallTalk:
    """The best small-talk row (if any), its score, whether it wins outright, and the other rows."""

    rest: list[ClassifierRecord]
    row: ClassifierRecord | None = None
    score: float = 0.0
    strong: bool = False


def _letters(text: str) -> int:
    return sum(1 for ch in text if ch.isalnum())


def score(row: ClassifierRecord, text: str, semantic_hit: bool) -> float:
    """The share of ``text`` (letters and digits) the row's match covers; 0.0 when it does not match."""
    if semantic_hit or (row.matcher is not None and row.matcher.kind == "EXACT" and row.matcher.matches(text)):
        return 1.0
    matcher = row.matcher
    if matcher is None or matcher.kind == "SEMANTIC" or not matcher.matches(text):
        return 0.0
    if matcher.regex is not None:
        found = matcher.regex.search(text)
        covered = found.group(0) if found else ""
    else:
        covered = matcher.pattern
    total = _letters(text)
    return min(1.0, _letters(covered) / total) if total else 0.0


def score_small_talk(turn: Turn, rows: Sequence[ClassifierRecord], semantic: dict[int, bool] | None) -> SmallTalk:
    """Split ``rows`` (enabled, in priority order) into the small-talk topics' and the others'."""
    topics = {code.strip().upper() for code in turn.settings.flows.small_talk_intents}
    if not topics:
        return SmallTalk(list(rows))
    best: tuple[float, ClassifierRecord] | None = None
    rest = []
    for row in rows:
        if row.intent_code not in topics:
            rest.append(row)
            continue
        try:
            value = score(row, turn.user_text, bool((semantic or {}).get(row.classifier_id)))
        except RegexTimeoutError as exc:
            turn.audit(stages.INTENT_CLASSIFIER_PATTERN_TIMEOUT, {"classifierId": row.classifier_id, "error": exc.message})
            continue
        if value > 0 and (best is None or value > best[0]):
            best = (value, row)
    if best is None:
        return SmallTalk(rest)
    minimum = turn.settings.flows.small_talk_min_score
    talk = SmallTalk(rest, best[1], round(best[0], 3), best[0] >= minimum)
    if talk.strong:
        audit_small_talk(turn, talk)
    return talk


def audit_small_talk(turn: Turn, talk: SmallTalk) -> None:
    assert talk.row is not None
    turn.audit(stages.INTENT_SMALL_TALK_MATCHED, {
        "intent": talk.row.intent_code, "classifierId": talk.row.classifier_id, "score": talk.score,
        "minScore": turn.settings.flows.small_talk_min_score,
        "outright": talk.strong})
