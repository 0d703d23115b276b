package io.mcore4j.planner;

/**
 * A layout that runs, with its estimates.
 *
 * @param layout the layout
 * @param memory the peak of its fullest rank
 * @param time its iteration time
 * @param fits whether the peak fits in one GPU's memory
 */
public record PlannedLayout(Layout layout, MemoryEstimate memory, TimeEstimate time, boolean fits) {}
