"""Retrieval quality on one's own questions: recall@k and MRR over a labelled question file.

The file is YAML (a list, or ``{questions: [...]}``) or JSON Lines, one question per entry::

    - question: how long does shipping take?
      expected: [shipping.md]          # the document ids (sources) that answer it
    - {question: can I pay by card, expected: payments.md}

A document counts as retrieved at the rank of its best passage; ``recall@k`` is the share of a
question's expected documents among the first ``k`` documents, ``MRR`` the mean of ``1 / rank``
of the first expected document (0 when none is in the first ``k``), both averaged over questions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from convengine.catalog.errors import ErrorCode, InvalidInputError
from convengine.knowledge.search import SearchHit

PASSAGES_PER_DOCUMENT = 4
"""Passages asked for per document of ``k``, so that ``k`` distinct documents are usually ranked."""


@dataclass(frozen=True, slots=True)
class LabelledQuestion:
    question: str
    expected: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class QuestionResult:
    question: str
    expected: tuple[str, ...]
    retrieved: tuple[str, ...]
    """The first ``k`` documents, best first."""
    recall: float
    reciprocal_rank: float


@dataclass(frozen=True, slots=True)
class EvalReport:
    k: int
    results: tuple[QuestionResult, ...]

    @property
    def recall_at_k(self) -> float:
        return sum(r.recall for r in self.results) / len(self.results) if self.results else 0.0

    @property
    def mrr(self) -> float:
        return sum(r.reciprocal_rank for r in self.results) / len(self.results) if self.results else 0.0

    def __str__(self) -> str:
        return f"{len(self.results)} questions: recall@{self.k} {self.recall_at_k:.3f}, MRR {self.mrr:.3f}"


def _entry(item: object, where: str) -> LabelledQuestion:
    if not isinstance(item, dict) or not isinstance(item.get("question"), str) or not item["question"].strip():
        raise InvalidInputError(f"{where}: needs a non-empty 'question' text", code=ErrorCode.INVALID_INPUT)
    given = item.get("expected")
    expected = [given] if isinstance(given, str) else given
    if not isinstance(expected, list) or not expected or not all(isinstance(e, str) and e for e in expected):
        raise InvalidInputError(f"{where}: 'expected' must be a document id or a non-empty list of them",
                                code=ErrorCode.INVALID_INPUT)
    return LabelledQuestion(item["question"], tuple(str(e) for e in expected))


def load_questions(path: str | Path) -> list[LabelledQuestion]:
    """The labelled questions of a ``.yaml``/``.yml`` or ``.jsonl`` file (errors name the entry)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeError) as exc:
        raise InvalidInputError(f"{path}: cannot be read ({exc})", code=ErrorCode.INVALID_INPUT) from exc
    if path.suffix == ".jsonl":
        items = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    items.append((json.loads(line), f"{path}:{number}"))
                except json.JSONDecodeError as exc:
                    raise InvalidInputError(f"{path}:{number}: not JSON ({exc.msg})",
                                            code=ErrorCode.INVALID_INPUT) from exc
    else:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InvalidInputError(f"{path}: not YAML ({exc})", code=ErrorCode.INVALID_INPUT) from exc
        data = data.get("questions") if isinstance(data, dict) else data
        if not isinstance(data, list):
            raise InvalidInputError(f"{path}: expected a list of questions (or 'questions:' holding one)",
                                    code=ErrorCode.INVALID_INPUT)
        items = [(item, f"{path} entry {i}") for i, item in enumerate(data, start=1)]
    if not items:
        raise InvalidInputError(f"{path}: holds no question", code=ErrorCode.INVALID_INPUT)
    return [_entry(item, where) for item, where in items]


def score(question: LabelledQuestion, hits: Sequence[SearchHit], k: int) -> QuestionResult:
    documents = tuple(dict.fromkeys(h.source for h in hits))[:k]
    expected = set(question.expected)
    rank = next((i for i, source in enumerate(documents, start=1) if source in expected), None)
    return QuestionResult(question.question, question.expected, documents,
                          len(expected & set(documents)) / len(expected), 1.0 / rank if rank else 0.0)


def evaluate(search: Callable[[str, int], Sequence[SearchHit]], questions: Sequence[LabelledQuestion],
             k: int = 5) -> EvalReport:
    """recall@k and MRR of ``search(question, passages)`` (e.g. ``lambda q, n: kb.search("faq", q, n)``)."""
    if k < 1:
        raise InvalidInputError(f"k must be at least 1, not {k}", code=ErrorCode.INVALID_INPUT)
    return EvalReport(k, tuple(score(q, search(q.question, k * PASSAGES_PER_DOCUMENT), k) for q in questions))
