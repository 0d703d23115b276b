package io.mcore4j.models.transformer;

import io.mcore4j.core.autograd.Recompute;
import io.mcore4j.core.random.DeterministicRandom;

/**
 * Replays dropout generators' positions so that the masks of a recompute's backward rerun equal
 * those its first run drew: {@link Recompute} captures the positions before the first run,
 * restores them before the rerun and afterwards puts back the positions it found, so later draws
 * continue as if nothing had been recomputed. The first run draws masks because it runs in a
 * training scope ({@link Dropout}).
 */
record DropoutReplay(DeterministicRandom... generators) implements Recompute.Replay {
    @Override
    public Object capture() {
        long[] states = new long[generators.length];
        for (int i = 0; i < states.length; i++) {
            states[i] = generators[i].state();
        }
        return states;
    }

    @Override
    public void restore(Object token) {
        long[] states = (long[]) token;
        for (int i = 0; i < states.length; i++) {
            generators[i].restore(states[i]);
        }
    }
}
