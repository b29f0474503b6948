"""GenerationOptions, the one declaration of the generation options: its checks and per-task refusals
(each error carrying the field it is about), the export's defaults filled from the manifest, and the
surfaces built from its fields (the model classes' keywords, the commands' flags), so that every option
is reachable from each or refused there with a reason. Torch-free, on the committed exports."""

import json
import math
import pickle
from dataclasses import fields
from pathlib import Path

import click
import pytest
import typer.main
from typer.testing import CliRunner

from onnxformer.cli.main import app
from onnxformer.runtime import GenerationOptions, InputError, ManifestError, load
from onnxformer.runtime.generation_options import DEFAULTS, OPTIONS, describe, names_for
from onnxformer.runtime.manifest import GenerationDefaults

EXPORTED = Path(__file__).resolve().parents[2] / "exported"
runner = CliRunner()
COMMANDS = {"generate": ("generate",), "seq2seq": ("seq2seq",), "batch": ("encode", "generate", "seq2seq")}


@pytest.fixture(scope="module")
def models() -> dict:
    return {family: load(EXPORTED / family, device="cpu", threads=1) for family in ("gpt", "bert", "t5")}


def test_input_error_keeps_its_old_form_and_carries_a_field_through_pickling() -> None:
    assert InputError("no field").field is None and str(InputError("no field")) == "no field"
    error = pickle.loads(pickle.dumps(InputError("top_p is off", field="top_p")))  # Ray pickles errors
    assert (str(error), error.field) == ("top_p is off", "top_p")


BAD = [
    ("max_new_tokens", -1),
    ("max_new_tokens", 2.0),
    ("temperature", -0.5),
    ("temperature", math.nan),
    ("temperature", 1e301),
    ("temperature", 2**1100),  # too large for a float: refused, not an OverflowError
    ("top_k", True),
    ("top_k", -2),
    ("top_p", 0),
    ("top_p", 1.5),
    ("seed", -1),
    ("seed", "7"),
    ("stop", "."),
    ("stop", [""]),
    ("stop_tokens", 3),
    ("stop_tokens", [-1]),
    ("stop_tokens", "ab"),
    ("num_beams", 0),
    ("num_beams", None),
    ("length_penalty", 10.5),
    ("length_penalty", math.inf),
    ("truncate", "no"),
]


@pytest.mark.parametrize(("name", "value"), BAD)
def test_a_value_out_of_range_is_refused_naming_its_field(name: str, value: object) -> None:
    with pytest.raises(InputError, match=f"^{name} must be ") as refused:
        GenerationOptions(**{name: value})
    assert refused.value.field == name
    assert describe(name) in str(refused.value)


def test_values_in_range_are_kept_in_their_field_types() -> None:
    options = GenerationOptions(
        max_new_tokens=0, temperature=0, top_k=10**20, top_p=1, seed=2**130, stop=[" the", "."],
        stop_tokens=[2], num_beams=1, length_penalty=-10, truncate=False,
    )  # fmt: skip
    assert options.stop == (" the", ".") and options.stop_tokens == (2,)
    assert isinstance(options.temperature, float) and isinstance(options.length_penalty, float)
    assert options.given() == [f.name for f in fields(GenerationOptions) if f.name != "num_beams"]
    assert GenerationOptions().given() == [] and hash(options) == hash(GenerationOptions.of(options))


def test_beam_search_with_sampling_options_is_refused_as_num_beams() -> None:
    with pytest.raises(InputError, match="beam search chooses tokens deterministically") as refused:
        GenerationOptions(num_beams=2, temperature=0)
    assert refused.value.field == "num_beams"


def test_unknown_keywords_are_refused_by_name() -> None:
    with pytest.raises(InputError, match="'temprature' is not a generation option") as refused:
        GenerationOptions.of(temprature=0)
    assert refused.value.field == "temprature"
    assert GenerationOptions.of(GenerationOptions(seed=1), top_k=3) == GenerationOptions(seed=1, top_k=3)


def test_every_task_takes_its_options_and_refuses_the_others_saying_why() -> None:
    assert names_for("encode") == ("truncate",)
    assert names_for("generate") == (
        "max_new_tokens", "temperature", "top_k", "top_p", "seed", "stop", "stop_tokens",
    )  # fmt: skip
    assert names_for("seq2seq") == (
        "max_new_tokens", "temperature", "top_k", "top_p", "seed", "stop_tokens", "num_beams",
        "length_penalty",
    )  # fmt: skip
    samples = {"max_new_tokens": 3, "temperature": 0.5, "top_k": 2, "top_p": 0.5, "seed": 1, "stop": ["x"],
               "stop_tokens": [2], "num_beams": 2, "length_penalty": 0.5, "truncate": False}  # fmt: skip
    assert set(samples) == set(OPTIONS)  # a new option gets a sample here
    for task in ("encode", "generate", "seq2seq"):
        for name, value in samples.items():
            options = GenerationOptions(**{name: value})
            if task in OPTIONS[name].tasks:
                assert options.check(task) is options
                continue
            with pytest.raises(InputError) as refused:
                options.check(task)
            assert refused.value.field == name
            assert str(refused.value).startswith(f"{name}: not an option of {task} ({OPTIONS[name].why_not})")


def test_unset_options_take_the_manifest_defaults(models: dict) -> None:
    defaults = models["gpt"].export.manifest.generation
    resolved = GenerationOptions(top_k=3).resolve(defaults)
    assert (resolved.max_new_tokens, resolved.temperature, resolved.top_p, resolved.stop_tokens) == (
        defaults.max_new_tokens, defaults.temperature, defaults.top_p, defaults.stop_tokens,
    )  # fmt: skip
    assert resolved.top_k == 3 and resolved.seed is None and resolved.stop is None
    beams = GenerationOptions(num_beams=2).resolve(defaults)  # beam search takes no sampling options
    assert beams.temperature is None and beams.max_new_tokens == defaults.max_new_tokens
    manifest_names = {f.name for f in fields(GenerationDefaults)}
    assert {name for name, option in OPTIONS.items() if option.manifest} <= manifest_names
    bad = GenerationDefaults(max_new_tokens=5, temperature=1e305, top_k=0, top_p=1.0, stop_tokens=())
    with pytest.raises(ManifestError, match=r"generation\.temperature must be"):
        GenerationOptions().resolve(bad)


CALLS = [
    ("gpt", lambda m: m.generate("a", top_p=0), "top_p"),
    ("gpt", lambda m: m.generate("a", GenerationOptions(seed=1), seed=-1), "seed"),
    ("gpt", lambda m: m.generate("a", num_beams=3), "num_beams"),
    ("gpt", lambda m: m.generate_ids([[1]], stop=["x"]), "stop"),
    ("gpt", lambda m: m.generate("a", stop_tokens=[10**6]), "stop_tokens"),
    ("gpt", lambda m: m.generate(["a", " cat" * 100]), "texts[1]"),
    ("gpt", lambda m: m.generate_ids([[1], [10**6]]), "texts[1]"),
    ("gpt", lambda m: m.generate([]), "texts"),
    ("gpt", lambda m: m.stream(["a"]), "texts"),
    ("t5", lambda m: m.generate(["a", ""]), "texts[1]"),
    ("t5", lambda m: m.generate("a", stop=["x"]), "stop"),
    ("t5", lambda m: m.generate("a", length_penalty=11), "length_penalty"),
    ("t5", lambda m: m.generate("a", num_beams=10**6), "num_beams"),
    ("t5", lambda m: m.beam_search_ids([[5, 2]], num_beams=1, top_k=3), "top_k"),
    ("bert", lambda m: m.embed(["a", 3]), "texts[1]"),
    ("bert", lambda m: m.embed("a", truncate="no"), "truncate"),
]


@pytest.mark.parametrize(("family", "call", "field"), CALLS)
def test_the_runtime_names_the_field_of_each_refusal(models: dict, family: str, call, field: str) -> None:
    with pytest.raises(InputError) as refused:
        call(models[family])
    assert refused.value.field == field, str(refused.value)


def test_a_generation_options_value_equals_the_keywords(models: dict) -> None:
    gpt, t5 = models["gpt"], models["t5"]
    options = GenerationOptions(temperature=1.0, seed=4, top_k=20, max_new_tokens=12, stop=["."])
    assert gpt.generate(["The cat", "A dog"], options) == gpt.generate(
        ["The cat", "A dog"], temperature=1.0, seed=4, top_k=20, max_new_tokens=12, stop=["."]
    )
    assert "".join(gpt.stream("The cat", options)) == gpt.generate("The cat", options)
    beams = GenerationOptions(num_beams=6, length_penalty=-10.0)
    assert t5.generate("While.", beams) == t5.generate("While.", num_beams=6, length_penalty=-10.0)
    # length_penalty changes which beam wins here, so it cannot have been dropped on the way
    assert t5.generate("While.", beams) != t5.generate("While.", beams, length_penalty=10.0)


def _params(command: str) -> dict[str, click.Parameter]:
    group = typer.main.get_command(app)
    found = group.get_command(click.Context(group), command)
    return {param.name: param for param in found.params}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_option_is_a_flag_of_the_commands(command: str) -> None:
    """generate, seq2seq and batch take their flags from the fields: every option is a flag with the
    field's help and default, hidden where the command's tasks do not take it (and refused there)."""
    params = _params(command)
    tasks = COMMANDS[command]
    for name, option in OPTIONS.items():
        assert name in params, f"{command} has no flag for {name}"
        flag = params[name]
        assert flag.help.startswith(option.help) and flag.default == DEFAULTS[name]
        assert flag.hidden == (not set(tasks) & set(option.tasks)), name


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["generate", "gpt", "a", "--num-beams", "2"], "num_beams: not an option of generate (beam search"),
        (["generate", "gpt", "a", "--no-truncate"], "truncate: not an option of generate"),
        (["seq2seq", "t5", "a", "--stop", "x"], "stop: not an option of seq2seq (stop strings"),
        (["seq2seq", "t5", "a", "--top-p", "0"], "top_p must be a number in (0, 1], got 0.0"),
        (["seq2seq", "t5", "a", "--num-beams", "2", "--seed", "1"], "beam search chooses tokens"),
    ],
)
def test_the_commands_refuse_an_option_saying_why(args: list[str], message: str) -> None:
    args[1] = str(EXPORTED / args[1])
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and result.stderr.startswith(f"error: {message}"), result.output


def test_length_penalty_and_stop_tokens_reach_the_model_from_the_command_line(models: dict) -> None:
    t5, gpt = models["t5"], models["gpt"]
    outputs = {}
    for penalty in ("-10", "10"):
        args = ["seq2seq", str(EXPORTED / "t5"), "While.", "--num-beams", "6", "--length-penalty", penalty]
        result = runner.invoke(app, [*args, "--json"])
        assert result.exit_code == 0, result.output
        (row,) = json.loads(result.stdout)["results"]
        assert row["output"] == t5.generate("While.", num_beams=6, length_penalty=float(penalty))
        outputs[penalty] = row["output"]
    assert outputs["-10"] != outputs["10"]
    stop = [gpt.tokenizer.encode(" the")[0], gpt.tokenizer.encode(".")[0]]
    args = ["generate", str(EXPORTED / "gpt"), "The cat", "--temperature", "0", "--json"]
    result = runner.invoke(app, [*args, "--stop-tokens", str(stop[0]), "--stop-tokens", str(stop[1])])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["results"]
    assert row["output"] == gpt.generate("The cat", temperature=0, stop_tokens=stop)
