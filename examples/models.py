"""A model module for ProcessOffload: importable by name, loaded once per worker process."""

# --8<-- [start:models]
# models.py: importable by name, so worker processes can find it.
import json

MODEL: dict[str, float] | None = None


def load(path: str) -> None:
    global MODEL
    with open(path) as file:  # once per worker process
        MODEL = json.load(file)


def score(features: list[float]) -> float:
    assert MODEL is not None, "load() runs first, in every worker"
    return sum(w * x for w, x in zip(MODEL["weights"], features, strict=True)) + MODEL["bias"]


# --8<-- [end:models]
