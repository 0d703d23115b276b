package io.mcore4j.training.pretrained;

/** Checks of a program's token rows before any rank builds a tensor from them, naming the row and position. */
final class TokenChecks {
    private TokenChecks() {}

    /**
     * @param what what a row is, for messages ("sequence", "sample")
     * @param rows the rows
     * @param minLength the fewest tokens a row may have
     * @param maxLength the most tokens a row may have
     * @param why why {@code maxLength} is the most, for messages
     * @param vocab ids must be in {@code [0, vocab)}
     * @return the rows' common length
     * @throws IllegalArgumentException naming the row, its length or the position and id that are wrong
     */
    static int rows(String what, int[][] rows, int minLength, int maxLength, String why, int vocab) {
        if (rows == null || rows.length == 0) {
            throw new IllegalArgumentException("expected at least one " + what + "; got none");
        }
        int length = -1;
        for (int i = 0; i < rows.length; i++) {
            int[] row = rows[i];
            if (row == null) {
                throw new IllegalArgumentException(what + " " + i + " is null; expected token ids");
            }
            if (length < 0) {
                length = row.length;
                if (length < minLength || length > maxLength) {
                    throw new IllegalArgumentException(what + " 0 has " + length + " tokens; expected " + minLength + " to "
                            + maxLength + " (" + why + ")");
                }
            } else if (row.length != length) {
                throw new IllegalArgumentException(what + " " + i + " has " + row.length + " tokens but " + what + " 0 has "
                        + length + "; expected rows of equal length");
            }
            for (int j = 0; j < row.length; j++) {
                if (row[j] < 0 || row[j] >= vocab) {
                    throw new IllegalArgumentException(what + " " + i + ", position " + j + ": token id " + row[j]
                            + " is outside the model's vocabulary [0, " + vocab + ")");
                }
            }
        }
        return length;
    }
}
