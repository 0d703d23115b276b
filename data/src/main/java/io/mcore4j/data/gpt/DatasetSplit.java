package io.mcore4j.data.gpt;

/** The three parts a corpus is split into. */
public enum DatasetSplit {
    /** Training data. */
    TRAIN,
    /** Validation data. */
    VALID,
    /** Test data. */
    TEST
}
