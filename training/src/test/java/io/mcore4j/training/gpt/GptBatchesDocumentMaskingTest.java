package io.mcore4j.training.gpt;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.mcore4j.contextparallel.ContextParallelSplit;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.PackedSequences;
import io.mcore4j.data.gpt.SampleDataset;
import io.mcore4j.data.sampler.DataloaderType;
import io.mcore4j.training.MicroBatch;

import java.io.InputStreamReader;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * {@link GptBatches} with Megatron's {@code --reset-position-ids}, {@code --reset-attention-mask} and
 * {@code --eod-mask-loss} against {@code ltor_masks.json}, the position ids, attention mask and loss mask
 * that Megatron's {@code get_ltor_masks_and_position_ids} gives the same windows (written by
 * {@code scripts/megatron-fixtures/ltor_masks.py}: EODs inside a window, consecutive, first, last, past
 * the inputs, none); each flag alone changes only its own part; under context parallelism every per-token
 * tensor is split alike.
 */
class GptBatchesDocumentMaskingTest {
    private static final JsonObject FIXTURE = fixture();
    private static final int EOD = FIXTURE.get("eod").getAsInt();
    private static final int SEQ = FIXTURE.get("seq_length").getAsInt();
    private static final List<JsonObject> SAMPLES = samples();

    @Test
    void allFlagsGiveMegatronsMasksAndPositions() {
        try (NDManager m = Mcore4j.newRootManager()) {
            MicroBatch batch = batches(new DocumentMasking(EOD, true, true, true), new ContextParallelSplit(1, 0)).microBatch(m, 0, 0);
            PackedSequences packed = batch.packed();
            long[][] positions = columns(batch.positionIds());
            long[][] lossMask = columns(batch.lossMask());
            for (int c = 0; c < SAMPLES.size(); c++) {
                JsonObject expected = SAMPLES.get(c);
                assertArrayEquals(longs(expected.getAsJsonArray("position_ids")), positions[c], "position ids of sample " + c);
                assertArrayEquals(longs(expected.getAsJsonArray("loss_mask")), lossMask[c], "loss mask of sample " + c);
                int[] ids = packed.sequenceIds(c);
                JsonArray mask = expected.getAsJsonArray("attention_mask");
                for (int q = 0; q < SEQ; q++) {
                    JsonArray row = mask.get(q).getAsJsonArray();
                    for (int k = 0; k < SEQ; k++) {
                        boolean attends = k <= q && ids[k] == ids[q];
                        assertEquals(row.get(k).getAsBoolean(), !attends, "attention of sample " + c + " query " + q + " key " + k);
                    }
                }
            }
        }
    }

    @Test
    void eachFlagAloneChangesItsOwnPart() {
        try (NDManager m = Mcore4j.newRootManager()) {
            ContextParallelSplit whole = new ContextParallelSplit(1, 0);
            MicroBatch positions = batches(new DocumentMasking(EOD, true, false, false), whole).microBatch(m, 0, 0);
            assertNull(positions.packed());
            assertNull(positions.lossMask());
            assertArrayEquals(longs(SAMPLES.get(0).getAsJsonArray("position_ids")), columns(positions.positionIds())[0]);

            MicroBatch attention = batches(new DocumentMasking(EOD, false, true, false), whole).microBatch(m, 0, 0);
            assertNull(attention.positionIds());
            assertNull(attention.lossMask());
            assertArrayEquals(new int[] {0, 4, 5, 11, 16}, attention.packed().offsets(0), "sample 0's documents");
            assertArrayEquals(new int[] {0, 1, 16}, attention.packed().offsets(1), "an EOD first and one last");

            MicroBatch loss = batches(new DocumentMasking(EOD, false, false, true), whole).microBatch(m, 0, 0);
            assertNull(loss.positionIds());
            assertNull(loss.packed());
            long[][] mask = columns(loss.lossMask());
            long[][] tokens = columns(loss.tokens());
            for (int c = 0; c < mask.length; c++) {
                for (int t = 0; t < SEQ; t++) {
                    assertEquals(tokens[c][t] == EOD ? 0 : 1, mask[c][t], "loss mask of sample " + c + " at " + t);
                }
            }
            MicroBatch plain = batches(DocumentMasking.NONE, whole).microBatch(m, 0, 0);
            assertArrayEquals(columns(plain.tokens())[0], tokens[0]);
        }
    }

    @Test
    void contextParallelRanksSplitEveryTensorAlike() {
        try (NDManager m = Mcore4j.newRootManager()) {
            DocumentMasking all = new DocumentMasking(EOD, true, true, true);
            MicroBatch whole = batches(all, new ContextParallelSplit(1, 0)).microBatch(m, 0, 0);
            for (int rank = 0; rank < 2; rank++) {
                ContextParallelSplit split = new ContextParallelSplit(2, rank);
                MicroBatch part = batches(all, split).microBatch(m, 0, 0);
                assertEquals(whole.packed(), part.packed(), "every rank keeps the whole micro-batch's sequences");
                for (int c = 0; c < SAMPLES.size(); c++) {
                    long[] mine = split.tokenIndicesOf(rank, whole.packed(), c, SEQ);
                    long[][] wholeTensors = {columns(whole.tokens())[c], columns(whole.labels())[c],
                            columns(whole.positionIds())[c], columns(whole.lossMask())[c]};
                    long[][] partTensors = {columns(part.tokens())[c], columns(part.labels())[c],
                            columns(part.positionIds())[c], columns(part.lossMask())[c]};
                    for (int k = 0; k < wholeTensors.length; k++) {
                        for (int t = 0; t < mine.length; t++) {
                            assertEquals(wholeTensors[k][(int) mine[t]], partTensors[k][t],
                                    "tensor " + k + " of sample " + c + " on CP rank " + rank + " at " + t);
                        }
                    }
                }
            }
        }
    }

    @Test
    void aFlagWithoutAnEndOfDocumentIdIsRefused() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> new DocumentMasking(-1, false, true, false));
        assertEquals("--reset-attention-mask needs the tokenizer's end-of-document id (give --tokenizer-type, or --eod-token"
                + " for a HuggingFace tokenizer without one)", e.getMessage());
    }

    /** One micro-batch of all fixture windows, in order. */
    private static GptBatches batches(DocumentMasking masking, ContextParallelSplit split) {
        SampleDataset data = new SampleDataset() {
            @Override
            public long size() {
                return SAMPLES.size();
            }

            @Override
            public int sequenceLength() {
                return SEQ;
            }

            @Override
            public void sample(long index, int[] destination) {
                int[] text = ints(SAMPLES.get((int) index).getAsJsonArray("text"));
                System.arraycopy(text, 0, destination, 0, text.length);
            }
        };
        return new GptBatches(data, SAMPLES.size(), 0, 1, split, DataloaderType.SINGLE, masking);
    }

    /** An [s, b] tensor's columns as int64 rows. */
    static long[][] columns(NDArray x) {
        NDArray t = x.transpose(1, 0).toType(DataType.INT64, false);
        long[] flat = t.toLongArray();
        int b = (int) x.getShape().get(1);
        int s = (int) x.getShape().get(0);
        long[][] out = new long[b][s];
        for (int c = 0; c < b; c++) {
            System.arraycopy(flat, c * s, out[c], 0, s);
        }
        return out;
    }

    private static long[] longs(JsonArray a) {
        long[] out = new long[a.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = (long) a.get(i).getAsDouble();
        }
        return out;
    }

    private static int[] ints(JsonArray a) {
        int[] out = new int[a.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = a.get(i).getAsInt();
        }
        return out;
    }

    private static List<JsonObject> samples() {
        List<JsonObject> out = new ArrayList<>();
        for (JsonElement e : FIXTURE.getAsJsonArray("samples")) {
            out.add(e.getAsJsonObject());
        }
        return out;
    }

    private static JsonObject fixture() {
        try (Reader r = new InputStreamReader(GptBatchesDocumentMaskingTest.class.getResourceAsStream("ltor_masks.json"),
                StandardCharsets.UTF_8)) {
            return JsonParser.parseReader(r).getAsJsonObject();
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }
}
