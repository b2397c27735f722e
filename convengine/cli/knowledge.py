"""``convengine knowledge``: ingest documents into knowledge bases, list, search and delete them."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from convengine.catalog.defaults import DEFAULT_DATABASE_URL
from convengine.catalog.errors import ErrorCode, InvalidInputError
from convengine.cli.guard import guarded, terminal
from convengine.security.terminal import inert

knowledge_app = typer.Typer(no_args_is_help=True,
                            help="Knowledge bases: ingest documents, list, search, evaluate, delete.")
err = terminal(stderr=True)
out = terminal()

UrlOption = Annotated[str, typer.Option("--url", help="Database URL (sqlite:///FILE or postgresql://...)",
                                        envvar="CONVENGINE_DATABASE_URL")]
EmbeddingsOption = Annotated[str, typer.Option(
    "--embeddings", help="none (full-text search only), hashing (offline, deterministic), or MODULE:NAME of a "
                         "LangChain Embeddings class or instance (e.g. langchain_openai:OpenAIEmbeddings)")]

WhereOption = Annotated[list[str] | None, typer.Option(
    "--where", help="KEY=VALUE: only documents whose metadata has it (repeat for several; a key twice: any of)")]
FusionOption = Annotated[str | None, typer.Option("--fusion", help="weighted or rrf (default: knowledge.fusion)")]
MmrOption = Annotated[float | None, typer.Option("--mmr", help="0..1: diversify the passages (1: relevance alone)")]


def _filters(where: list[str] | None) -> dict[str, list[str]] | None:
    """``--where KEY=VALUE`` options as metadata filters (text values)."""
    filters: dict[str, list[str]] = {}
    for item in where or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidInputError(f"--where {item!r}: use KEY=VALUE", code=ErrorCode.INVALID_INPUT)
        filters.setdefault(key, []).append(value)
    return filters or None


def load_embeddings(spec: str) -> Any:
    """An Embeddings model from its command-line name."""
    if spec in ("", "none"):
        return None
    if spec == "hashing":
        from convengine.knowledge import HashingEmbeddings

        return HashingEmbeddings()
    module, _, name = spec.partition(":")
    if not name:
        raise InvalidInputError(f"--embeddings {spec!r}: use none, hashing or MODULE:NAME",
                                code=ErrorCode.INVALID_INPUT)
    try:
        target = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise InvalidInputError(f"--embeddings {spec!r}: {exc}", code=ErrorCode.INVALID_INPUT) from exc
    return target() if isinstance(target, type) else target


def _open(url: str, embeddings: str) -> Any:
    from convengine.knowledge import Knowledge
    from convengine.settings import EngineSettings

    limits = EngineSettings.build().knowledge.ingest  # CONVENGINE_KNOWLEDGE__INGEST__* apply
    return Knowledge.open(url, embeddings=load_embeddings(embeddings), limits=limits)


@knowledge_app.command("ingest")
@guarded
def ingest(
    kb: Annotated[str, typer.Argument(help="Knowledge base name (created when missing)")],
    paths: Annotated[list[Path], typer.Argument(help="Files or folders (text, Markdown, HTML, PDF)")],
    url: UrlOption = DEFAULT_DATABASE_URL,
    embeddings: EmbeddingsOption = "none",
    prune: Annotated[bool, typer.Option("--prune", help="Remove documents no longer found under PATHS")] = False,
    description: Annotated[str | None, typer.Option("--description", help="What the base is about")] = None,
    root: Annotated[Path | None, typer.Option("--root", help="Name documents by their path relative to this "
                                              "folder (default: relative to each folder given)")] = None,
    reembed: Annotated[bool, typer.Option("--reembed", help="The base was embedded with another model: embed "
                                          "every passage again with this one")] = False,
) -> None:
    """Read documents into a knowledge base; unchanged ones are skipped, changed ones replaced.

    Documents are named by their path relative to the folder given (or --root), so the same folder
    reached by another path is the same documents. Links leaving a folder and what is not a regular
    file are skipped; a document that cannot be read within the limits (knowledge.ingest.*) fails
    alone. Each is listed with the reason; exits 1 if any failed."""
    from convengine.knowledge.chunking import discover_files
    from convengine.knowledge.store import check_name

    check_name(kb)
    knowledge = _open(url, embeddings)
    try:
        files, _ = discover_files(list(paths), root)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=err) as bar:
            task = bar.add_task(f"ingesting into {kb}", total=len(files))
            report = knowledge.ingest(kb, paths, description=description, prune=prune, root=root, reembed=reembed,
                                      progress=lambda source, outcome: bar.advance(task))
    finally:
        knowledge.close()
    for label, problems in (("skipped", report.skipped), ("failed", report.failed)):
        for problem in problems:
            err.print(Text.assemble((label, "yellow" if label == "skipped" else "red"), " ", inert(str(problem))),
                      soft_wrap=True)
    out.print(inert(f"{kb}: {report}"), soft_wrap=True)
    if report.failed:
        raise typer.Exit(1)


@knowledge_app.command("list")
@guarded
def list_bases(url: UrlOption = DEFAULT_DATABASE_URL) -> None:
    """Every knowledge base with its documents and passages."""
    knowledge = _open(url, "none")
    bases, index = knowledge.list(), knowledge.vector_index
    knowledge.close()
    table = Table("knowledge base", "documents", "passages", "revision", "description")
    for base in bases:
        table.add_row(inert(base["kb_name"]), str(base["documents"]), str(base["chunks"]), str(base["revision"]),
                      inert(base["description"] or ""))
    out.print(table)
    out.print(inert(f"vector index: {index}"), soft_wrap=True)


@knowledge_app.command("search")
@guarded
def search(
    kb: Annotated[str, typer.Argument(help="Knowledge base name")],
    query: Annotated[str, typer.Argument(help="What to look for")],
    url: UrlOption = DEFAULT_DATABASE_URL,
    embeddings: EmbeddingsOption = "none",
    k: Annotated[int, typer.Option("-k", help="How many passages")] = 5,
    where: WhereOption = None,
    fusion: FusionOption = None,
    mmr: MmrOption = None,
) -> None:
    """The best passages for QUERY, with every score."""
    knowledge = _open(url, embeddings)
    hits = knowledge.search(kb, query, k, filters=_filters(where), fusion=fusion, mmr=mmr)
    knowledge.close()
    for hit in hits:
        vector = "-" if hit.vector is None else f"{hit.vector:.3f}"
        out.print(Text.assemble((f"{hit.score:.3f}", "bold"), f" (lexical {hit.lexical:.3f}, vector {vector}) ",
                                inert(f"{hit.source} #{hit.position} {hit.title or ''}")), soft_wrap=True)
        out.print(Text.assemble("  ", inert(hit.text[:200])), soft_wrap=True)


@knowledge_app.command("eval")
@guarded
def eval_questions(
    kb: Annotated[str, typer.Argument(help="Knowledge base name")],
    questions: Annotated[Path, typer.Argument(help="Labelled questions: YAML or JSONL, each with question and "
                                                   "expected (document ids)")],
    url: UrlOption = DEFAULT_DATABASE_URL,
    embeddings: EmbeddingsOption = "none",
    k: Annotated[int, typer.Option("-k", help="Documents counted per question")] = 5,
    where: WhereOption = None,
    fusion: FusionOption = None,
    mmr: MmrOption = None,
    show: Annotated[str, typer.Option("--show", help="misses (questions under full recall), all, or none")] = "misses",
) -> None:
    """recall@k and MRR of searches of KB on labelled questions."""
    from convengine.knowledge.evaluation import load_questions

    if show not in ("misses", "all", "none"):
        raise InvalidInputError(f"--show {show!r}: use misses, all or none", code=ErrorCode.INVALID_INPUT)
    labelled = load_questions(questions)
    knowledge = _open(url, embeddings)
    report = knowledge.evaluate(kb, labelled, k, filters=_filters(where), fusion=fusion, mmr=mmr)
    knowledge.close()
    rows = [r for r in report.results if show == "all" or (show == "misses" and r.recall < 1.0)]
    if rows:
        table = Table("question", "expected", f"first {k} documents", "recall", "1/rank")
        for r in rows:
            table.add_row(inert(r.question), inert(", ".join(r.expected)), inert(", ".join(r.retrieved)),
                          f"{r.recall:.2f}", f"{r.reciprocal_rank:.2f}")
        out.print(table)
    out.print(Text.assemble(inert(kb), f": {len(report.results)} questions, ",
                            (f"recall@{k} {report.recall_at_k:.3f}", "bold"), ", ", (f"MRR {report.mrr:.3f}", "bold")))


@knowledge_app.command("delete")
@guarded
def delete(
    kb: Annotated[str, typer.Argument(help="Knowledge base name")],
    sources: Annotated[list[str] | None, typer.Argument(help="Documents to delete (default: the whole base)")] = None,
    url: UrlOption = DEFAULT_DATABASE_URL,
) -> None:
    """Delete documents of a knowledge base, or the whole base."""
    knowledge = _open(url, "none")
    count = knowledge.delete(kb, sources or None)
    knowledge.close()
    out.print(inert(f"{kb}: {count} document{'s' if count != 1 else ''} deleted"))
