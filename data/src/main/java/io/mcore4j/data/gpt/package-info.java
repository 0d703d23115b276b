/**
 * GPT pre-training samples: windows of {@code sequenceLength + 1} tokens cut across document boundaries of
 * an indexed dataset, in an order fixed by a seed, with train/valid/test splits, weighted blending of
 * several datasets and a synthetic mock. The index arrays behind a dataset are cached next to the data so a
 * restart does not rebuild them.
 */
package io.mcore4j.data.gpt;
