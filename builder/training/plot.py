"""The loss curve of a run as a PNG (matplotlib, no display needed)."""

import io


def loss_curve_png(history: dict[str, list], *, title: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4), dpi=100)
    axes.plot(history["step"], history["train_loss"], label="train", linewidth=0.8, alpha=0.7)
    if history["eval_step"]:
        axes.plot(history["eval_step"], history["val_loss"], "o-", label="held-out")
    axes.set_xlabel("step")
    axes.set_ylabel("loss")
    axes.set_yscale("log")
    axes.set_title(title)
    axes.legend()
    axes.grid(alpha=0.3)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()
