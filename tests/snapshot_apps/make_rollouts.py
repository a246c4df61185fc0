"""Writes recorded/rollouts/{10,20}.jsonl with verl 0.9.1's own RayPPOTrainer._dump_generations
(tests/workloads/verl_dump.py): GSM8K-style prompts, the same ones in both steps, answers that
improve from step 10 to 20, and the cases the flags are for (an empty answer, a loop, one cut at
the length limit). The Rollouts screen's snapshot and screenshot read these files.

    .venv/bin/python tests/snapshot_apps/make_rollouts.py
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "workloads"))
from verl_dump import VerlDumper  # noqa: E402

PROMPTS = [
    (
        "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
        "in May. How many clips did Natalia sell altogether in April and May?",
        "72",
    ),
    (
        "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of "
        "babysitting. How much did she earn?",
        "10",
    ),
    (
        "Betty is saving money for a new wallet which costs $100. Betty has only half of the "
        "money she needs. Her parents decided to give her $15 for that purpose, and her "
        "grandparents twice as much as her parents. How much more money does Betty need?",
        "5",
    ),
    (
        "Julie is reading a 120-page book. Yesterday, she was able to read 12 pages and today, "
        "she read twice as many pages as yesterday. If she wants to read half of the remaining "
        "pages tomorrow, how many pages should she read?",
        "42",
    ),
    (
        "James writes a 3-page letter to 2 different friends twice a week. How many pages does "
        "he write a year?",
        "624",
    ),
    (
        "Mark has a garden with flowers. He planted plants of three different colors in it. Ten "
        "of them are yellow, and there are 80% more of those in purple.",
        "35",
    ),
]
WORK = " ".join(
    f"Step {k}: {k * 7 % 23} times {k % 5 + 2} is {k * 7 % 23 * (k % 5 + 2)}, so we keep"
    for k in range(1, 60)
)


def answers(step: int) -> tuple[list[str], list[float]]:
    good = step >= 20
    outputs = [
        "In May she sold 48 / 2 = 24 clips. Altogether 48 + 24 = 72. #### 72",
        "Per minute she earns 12 / 60 = $0.2, so 50 minutes pay 0.2 * 50 = $10. #### 10"
        if good
        else "",
        "She has 100 / 2 = 50. Parents give 15, grandparents 30. 100 - 50 - 15 - 30 = 5. #### 5"
        if good
        else "She needs " + "the money, so she needs " * 24,
        "She read 12 + 24 = 36 pages, 120 - 36 = 84 remain, half is 42. #### 42",
        WORK[: 1400 + step],
        "There are 10 * 0.8 = 8 more purple: 18 purple, 28 in all. #### 28",
    ]
    scores = [1.0, 1.0 if good else 0.0, 1.0 if good else 0.0, 1.0, 0.0, 0.0]
    return outputs, scores


def main() -> None:
    folder = HERE / "recorded" / "rollouts"
    dumper = VerlDumper()
    for step in (10, 20):
        outputs, scores = answers(step)
        dumper.dump(
            step,
            [p for p, _ in PROMPTS],
            outputs,
            [g for _, g in PROMPTS],
            scores,
            {"acc": [s == 1.0 for s in scores]},
            str(folder),
        )
    dumper.close()


if __name__ == "__main__":
    main()
