"""Typer option types shared by the commands in cli.py and cli_quality.py."""

from __future__ import annotations

from typing import Annotated

import typer

ModelOption = Annotated[
    str | None,
    typer.Option(help="A local model folder, a .gguf file or a hub id (default: the bundled SmolLM2-135M-Instruct).", show_default=False),
]
ThreadsOption = Annotated[int | None, typer.Option(min=1, help="CPU threads for torch.", show_default=False)]
ExactOption = Annotated[bool, typer.Option("--exact", help="Score whole answers, line ending included, instead of reading only where answers fork.")]
