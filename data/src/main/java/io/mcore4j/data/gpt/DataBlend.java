package io.mcore4j.data.gpt;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * Dataset prefixes and their blending weights, as given by Megatron's {@code --data-path}: either
 * {@code weight prefix weight prefix ...} or a list of prefixes without weights (equal weights).
 *
 * @param prefixes dataset path prefixes (without {@code .bin}/{@code .idx})
 * @param weights one positive weight per prefix, not necessarily normalized
 */
public record DataBlend(List<Path> prefixes, List<Double> weights) {
    /** Validates and copies the lists. */
    public DataBlend {
        prefixes = List.copyOf(prefixes);
        weights = List.copyOf(weights);
        if (prefixes.isEmpty()) {
            throw new IllegalArgumentException("a data blend needs at least one dataset");
        }
        if (prefixes.size() != weights.size()) {
            throw new IllegalArgumentException(prefixes.size() + " datasets but " + weights.size() + " weights");
        }
        for (int k = 0; k < weights.size(); k++) {
            double w = weights.get(k);
            if (!(w > 0) || Double.isInfinite(w)) {
                throw new IllegalArgumentException("weight " + w + " of dataset " + prefixes.get(k) + " must be positive and finite");
            }
        }
    }

    /**
     * One dataset with weight 1.
     *
     * @param prefix its path prefix
     * @return the blend
     */
    public static DataBlend of(Path prefix) {
        return new DataBlend(List.of(prefix), List.of(1.0));
    }

    /**
     * Parses a whitespace-separated {@code --data-path} value.
     *
     * @param text e.g. {@code "0.7 data/a_text_document 0.3 data/b_text_document"}
     * @return the blend
     */
    public static DataBlend parse(String text) {
        return parse(List.of(text.trim().split("\\s+")));
    }

    /**
     * Parses {@code --data-path} arguments: all pairs of (weight, prefix), or only prefixes.
     *
     * @param tokens the arguments
     * @return the blend
     * @throws IllegalArgumentException if weights and prefixes are mixed up, naming the offending token
     */
    public static DataBlend parse(List<String> tokens) {
        if (tokens.isEmpty() || tokens.stream().anyMatch(String::isBlank)) {
            throw new IllegalArgumentException("data path " + tokens + " is empty or has blank entries");
        }
        boolean anyNumber = tokens.stream().anyMatch(DataBlend::isNumber);
        List<Path> prefixes = new ArrayList<>();
        List<Double> weights = new ArrayList<>();
        if (!anyNumber) {
            for (String t : tokens) {
                prefixes.add(Path.of(t));
                weights.add(1.0);
            }
            return new DataBlend(prefixes, weights);
        }
        if (tokens.size() % 2 != 0) {
            throw new IllegalArgumentException("data path " + tokens + " mixes weights and prefixes: expected pairs of weight and prefix");
        }
        for (int k = 0; k < tokens.size(); k += 2) {
            if (!isNumber(tokens.get(k))) {
                throw new IllegalArgumentException("data path entry " + k + " \"" + tokens.get(k) + "\" should be a weight");
            }
            if (isNumber(tokens.get(k + 1))) {
                throw new IllegalArgumentException("data path entry " + (k + 1) + " \"" + tokens.get(k + 1) + "\" should be a prefix, not a number");
            }
            weights.add(Double.parseDouble(tokens.get(k)));
            prefixes.add(Path.of(tokens.get(k + 1)));
        }
        return new DataBlend(prefixes, weights);
    }

    private static boolean isNumber(String token) {
        try {
            Double.parseDouble(token);
            return true;
        } catch (NumberFormatException e) {
            return false;
        }
    }

    /**
     * The weights divided by their sum.
     *
     * @return weights that sum to 1
     */
    public double[] normalizedWeights() {
        double sum = weights.stream().mapToDouble(Double::doubleValue).sum();
        return weights.stream().mapToDouble(w -> w / sum).toArray();
    }
}
