package io.mcore4j.data.sft;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;

/**
 * First-fit decreasing: a plan worked by hand, ties in index order, the rows numbered by their first sequence, and
 * random lengths against a plain quadratic first-fit decreasing written here (same rows, as sets), with every sequence
 * placed once and no row over its capacity.
 */
class PackingPlanTest {
    private static int[][] rows(PackingPlan plan) {
        int[][] rows = new int[plan.rows()][];
        for (int r = 0; r < rows.length; r++) {
            rows[r] = plan.row(r);
        }
        return rows;
    }

    @Test
    void aPlanWorkedByHand() {
        // longest first: 7 opens A, 5 opens B, 4 opens C, 3 into B (A has 1 left), 2 into C, 1 into A
        PackingPlan plan = PackingPlan.firstFitDecreasing(new int[] {5, 3, 7, 2, 4, 1}, 8);
        // renumbered by their first sequence: B {0, 1}, A {2, 5}, C {3, 4}
        assertArrayEquals(new int[][] {{0, 1}, {2, 5}, {3, 4}}, rows(plan));
        assertArrayEquals(new int[][] {{0, 1}, {2}}, rows(PackingPlan.firstFitDecreasing(new int[] {4, 4, 4}, 8)),
                "equal lengths are taken in index order");
        assertArrayEquals(new int[][] {{0}, {1}}, rows(PackingPlan.firstFitDecreasing(new int[] {8, 8}, 8)));
        assertEquals(0, PackingPlan.firstFitDecreasing(new int[0], 8).rows());
    }

    @Test
    void randomLengthsGiveThePlainFirstFitDecreasingRows() {
        Random random = new Random(42);
        for (int trial = 0; trial < 20; trial++) {
            int capacity = 1 + random.nextInt(300);
            int[] lengths = new int[random.nextInt(700)];
            for (int i = 0; i < lengths.length; i++) {
                // mostly short sequences, some of a whole row
                lengths[i] = random.nextInt(4) == 0 ? capacity : 1 + random.nextInt(Math.max(1, capacity / 3));
            }
            PackingPlan plan = PackingPlan.firstFitDecreasing(lengths, capacity);
            List<List<Integer>> expected = plainFirstFitDecreasing(lengths, capacity);
            List<List<Integer>> actual = new ArrayList<>();
            int[] placed = new int[lengths.length];
            int previousFirst = -1;
            for (int[] row : rows(plan)) {
                int sum = 0;
                for (int i : row) {
                    placed[i]++;
                    sum += lengths[i];
                }
                assertTrue(sum <= capacity, "a row of " + sum + " > " + capacity);
                assertTrue(row[0] > previousFirst, "rows in the order of their first sequence");
                previousFirst = row[0];
                actual.add(Arrays.stream(row).boxed().toList());
            }
            int[] once = new int[lengths.length];
            Arrays.fill(once, 1);
            assertArrayEquals(once, placed, "every sequence in exactly one row");
            expected.forEach(row -> row.sort(null));
            expected.sort((a, b) -> Integer.compare(a.get(0), b.get(0)));
            assertEquals(expected, actual, "trial " + trial);
        }
    }

    /** First-fit decreasing as a textbook writes it: every row tried in turn for each sequence. */
    private static List<List<Integer>> plainFirstFitDecreasing(int[] lengths, int capacity) {
        Integer[] order = new Integer[lengths.length];
        for (int i = 0; i < order.length; i++) {
            order[i] = i;
        }
        Arrays.sort(order, (a, b) -> lengths[a] != lengths[b] ? Integer.compare(lengths[b], lengths[a]) : Integer.compare(a, b));
        List<List<Integer>> rows = new ArrayList<>();
        List<Integer> free = new ArrayList<>();
        for (int i : order) {
            int r = 0;
            while (r < rows.size() && free.get(r) < lengths[i]) {
                r++;
            }
            if (r == rows.size()) {
                rows.add(new ArrayList<>());
                free.add(capacity);
            }
            rows.get(r).add(i);
            free.set(r, free.get(r) - lengths[i]);
        }
        return rows;
    }

    @Test
    void lengthsOutsideARowAreRefused() {
        assertEquals("sequence 1 has length 9, not in [1, 8]", assertThrows(IllegalArgumentException.class,
                () -> PackingPlan.firstFitDecreasing(new int[] {3, 9}, 8)).getMessage());
        assertEquals("sequence 0 has length 0, not in [1, 8]", assertThrows(IllegalArgumentException.class,
                () -> PackingPlan.firstFitDecreasing(new int[] {0}, 8)).getMessage());
    }
}
