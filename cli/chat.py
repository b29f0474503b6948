"""`onnxformer chat DIR`: an interactive chat in the terminal with a decoder export (torch-free): the
model's chat template, replies streamed as they come, the history kept within the context."""

import sys
from pathlib import Path
from typing import Annotated

import typer

from onnxformer.cli.errors import user_errors
from onnxformer.cli.options import FROM_FLAGS, Device, Threads, generation_options, load_model
from onnxformer.cli.printing import console
from onnxformer.cli.serve import read_template
from onnxformer.runtime.errors import InputError
from onnxformer.runtime.generation_options import GenerationOptions

HELP = "/reset clears the history, /exit (or Ctrl-D) ends"


@generation_options("generate")
def chat_command(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(help="A decoder export folder with a chat template.")],
    system: Annotated[str | None, typer.Option("--system", help="A system message to start with.")] = None,
    chat_template: Annotated[
        Path | None, typer.Option("--chat-template", help="A Jinja chat template file (else the export's).")
    ] = None,
    options: GenerationOptions = FROM_FLAGS,  # one flag per field: --max-new-tokens, --temperature, ...
    device: Device = "auto",
    threads: Threads = None,
) -> None:
    """Chat with the model in the terminal: type a message, read the reply as it is generated. The oldest
    turns are dropped when the history would outgrow the model's context."""
    from onnxformer.runtime.conversation import Conversation, model_template

    with user_errors(ctx):
        model = load_model(folder, "generate", device, threads)
        chat = Conversation(model, model_template(model, read_template(chat_template)), system=system,
                            options=options)  # fmt: skip
    interactive = sys.stdin.isatty()
    if interactive:
        console.print(f"chatting with {folder} ({HELP})", style="dim")
    for line in sys.stdin if not interactive else iter(lambda: input("> "), None):
        text = line.rstrip("\n")
        if text.strip() in ("/exit", "/quit"):
            break
        if text.strip() == "/reset":
            chat.reset()
            continue
        if not text.strip():
            continue
        try:
            for piece in chat.say(text):
                typer.echo(piece, nl=False)
        except InputError as error:
            console.print(f"[red]{error}[/]", markup=True)
            continue
        typer.echo()
        if chat.dropped:
            console.print(f"({chat.dropped} earliest messages dropped to fit the context)", style="dim")
