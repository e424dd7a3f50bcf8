"""Genetic algorithms on DEAP: a seeded, elitist loop with a deterministic budget, stagnation stop and progress.

The method supplies what is specific to it (how to draw a legal genome, the
legal mutations, the fitness); DEAP supplies the fitness and selection
machinery and the log book.  Selection is PIMCOMP's: the best ``elite``
share survives, each other individual survives with probability
``survive``, and mutations of survivors refill the population.  The best
fitness never gets worse from one generation to the next.

What stops the loop is deterministic (generations, a budget of fitness
evaluations, stagnation), so a seed gives the same genome on any machine
under any load; the wall-clock limit is only a safety net, and when it
decides, :attr:`Result.stopped` says so.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from deap import base, creator, tools
from tqdm import tqdm

if not hasattr(creator, "CimFitnessMin"):
    creator.create("CimFitnessMin", base.Fitness, weights=(-1.0,))


class Individual:
    """A genome with its DEAP fitness (lower is better)."""

    __slots__ = ("genome", "fitness")

    def __init__(self, genome: Any):
        self.genome = genome
        self.fitness = creator.CimFitnessMin()


@dataclass
class Result:
    """Outcome of :func:`evolve`.

    Attributes
    ----------
    best : Any
        The best genome found.
    fitness : float
        Its fitness.
    history : list of float
        Best fitness after every generation (non-increasing).
    generations : int
        Generations run.
    seconds : float
        Wall time.
    stopped : str
        Why the loop stopped: ``generations``, ``evaluations``, ``stagnation`` or ``time limit`` (the
        safety net: the only reason that depends on the machine's speed).
    evaluations : int
        Fitness calls made.
    """

    best: Any
    fitness: float
    history: list[float] = field(default_factory=list)
    generations: int = 0
    seconds: float = 0.0
    stopped: str = "generations"
    logbook: Any = None
    evaluations: int = 0


def evolve(init: Callable[[random.Random], Any], mutate: Callable[[Any, random.Random], Any],
           fitness: Callable[[Any], float], *, population: int = 200, generations: int = 100,
           elite: float = 0.3, survive: float = 0.2, seed: int = 0, time_limit: float | None = None,
           stagnation: int = 25, progress: bool = True, desc: str = "GA",
           seeds: list[Any] | None = None, evaluations: int | None = None) -> Result:
    """Minimise ``fitness`` over genomes.

    Parameters
    ----------
    init : callable
        ``rng -> genome``: a random legal genome.
    mutate : callable
        ``(genome, rng) -> genome``: a legal mutation (a new object).
    fitness : callable
        ``genome -> float``, lower is better.
    population, generations : int
    elite, survive : float
        Share of the best that always survive; survival probability of the others.
    seed : int
        Seed of every random choice.
    time_limit : float, optional
        Seconds, a safety net only: the best so far is returned when it is reached (it also cuts the first
        population short), and ``stopped`` says ``time limit``.
    stagnation : int
        Stop after this many generations without improvement.
    progress : bool
        Show a tqdm bar.
    seeds : list, optional
        Genomes to put in the first population (e.g. another method's answer).
    evaluations : int, optional
        Budget of fitness calls (the first population is always complete): the loop stops after the
        generation in which it is reached.  Deterministic, unlike ``time_limit``.

    Returns
    -------
    Result
    """
    rng = random.Random(seed)
    t0 = time.perf_counter()
    calls = 0

    def evaluate(ind: Individual) -> Individual:
        nonlocal calls
        calls += 1
        ind.fitness.values = (float(fitness(ind.genome)),)
        return ind

    pop = [evaluate(Individual(g)) for g in (seeds or [])][:population]
    cut = False  # the clock cut the first population short (the result then depends on the machine)
    while len(pop) < population:  # a time limit also bounds the first population (at least one new genome)
        if time_limit is not None and len(pop) > len(seeds or []) and time.perf_counter() - t0 > time_limit:
            cut = True
            break
        pop.append(evaluate(Individual(init(rng))))
    stats = tools.Statistics(lambda ind: ind.fitness.values[0])
    stats.register("min", np.min)
    stats.register("mean", np.mean)
    book = tools.Logbook()
    best = tools.selBest(pop, 1)[0]
    history = [best.fitness.values[0]]
    book.record(gen=0, **stats.compile(pop))
    stopped, since, gen = ("time limit" if cut else "generations"), 0, 0
    bar = tqdm(range(generations), desc=desc, disable=not progress, leave=False)
    for gen in bar:
        ranked = tools.selBest(pop, len(pop))
        n_elite = max(1, int(round(elite * len(ranked))))
        keep = ranked[:n_elite] + [ind for ind in ranked[n_elite:] if rng.random() < survive]
        children = []
        while len(keep) + len(children) < population:
            parent = keep[rng.randrange(len(keep))]
            children.append(evaluate(Individual(mutate(parent.genome, rng))))
        pop = keep + children
        cur = tools.selBest(pop, 1)[0]
        if cur.fitness.values[0] < best.fitness.values[0] * (1 - 1e-12):
            best, since = cur, 0
        else:
            since += 1
        history.append(best.fitness.values[0])
        book.record(gen=gen + 1, **stats.compile(pop))
        bar.set_postfix(best=f"{best.fitness.values[0]:.4g}")
        if since >= stagnation:
            stopped = "time limit" if cut else "stagnation"
            break
        if evaluations is not None and calls >= evaluations:
            stopped = "time limit" if cut else "evaluations"
            break
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            stopped = "time limit"
            break
    bar.close()
    return Result(best.genome, best.fitness.values[0], history, len(history) - 1,
                  time.perf_counter() - t0, stopped, book, calls)
