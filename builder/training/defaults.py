"""What training needs to know about each family, in one table keyed by family name.

The model side (classes, configs, presets) is `onnxformer.builder.families.FAMILIES`; this is the training
side: the task that makes batches, losses and quality checks, and the defaults chosen so each tiny model
meets its quality target in a few minutes on 2 CPU cores.
"""

from dataclasses import dataclass

from onnxformer.builder.training.bert_task import BERTTask
from onnxformer.builder.training.gpt_task import GPTTask
from onnxformer.builder.training.t5_task import T5Task

TrainingTask = GPTTask | BERTTask | T5Task


@dataclass(frozen=True)
class FamilyTraining:
    task: type[TrainingTask]  # builtin_corpus(seed, val_fraction=) and from_file(path, seed, val_fraction=)
    steps: int  # default optimizer steps on the built-in corpus
    learning_rate: float  # default peak learning rate
    headline: str  # the metric that says whether the model learned its task
    needs: tuple[str, ...] = ()  # config flags the task's losses read (heads that must be there)


TRAINING: dict[str, FamilyTraining] = {
    "gpt": FamilyTraining(GPTTask, steps=800, learning_rate=2e-3, headline="grammatical_rate"),
    "bert": FamilyTraining(
        BERTTask,
        steps=1200,
        learning_rate=1e-3,
        headline="classification_accuracy",
        needs=("mlm_head", "pooler", "classifier"),
    ),
    "t5": FamilyTraining(T5Task, steps=1200, learning_rate=2e-3, headline="exact_match"),
}
