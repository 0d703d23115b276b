package io.mcore4j.training.pretrained;

import io.mcore4j.data.gpt.SampleDataset;

/**
 * A program's own token sequences as GPT samples: each row is {@code seqLength + 1} ids, the model's
 * input its first {@code seqLength} and the labels its last. Copies the rows; checked by the caller.
 */
final class TokenSamples implements SampleDataset {
    private final int[][] rows;

    TokenSamples(int[][] rows) {
        this.rows = new int[rows.length][];
        for (int i = 0; i < rows.length; i++) {
            this.rows[i] = rows[i].clone();
        }
    }

    @Override
    public long size() {
        return rows.length;
    }

    @Override
    public int sequenceLength() {
        return rows[0].length - 1;
    }

    @Override
    public void sample(long index, int[] destination) {
        SampleDataset.checkIndex(index, rows.length);
        System.arraycopy(rows[(int) index], 0, destination, 0, rows[(int) index].length);
    }
}
