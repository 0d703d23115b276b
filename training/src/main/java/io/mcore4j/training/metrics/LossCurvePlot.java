package io.mcore4j.training.metrics;

import java.awt.BasicStroke;
import java.awt.Color;
import java.awt.Font;
import java.awt.FontMetrics;
import java.awt.Graphics2D;
import java.awt.RenderingHints;
import java.awt.geom.AffineTransform;
import java.awt.image.BufferedImage;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.math.BigDecimal;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import javax.imageio.ImageIO;

/**
 * The loss curve's drawing, with Java2D; a class of its own so that runtimes without
 * {@code java.desktop} never load AWT classes.
 */
final class LossCurvePlot {
    private static final Color TRAIN = new Color(31, 119, 180);
    private static final Color VALID = new Color(214, 39, 40);
    private static final Color GRID = new Color(225, 225, 225);

    private LossCurvePlot() {}

    static void draw(String title, List<double[]> train, List<double[]> valid, Path out) {
        int w = 900;
        int h = 540;
        int left = 80;
        int right = w - 30;
        int top = 50;
        int bottom = h - 60;
        double maxIt = 1;
        double lo = Double.MAX_VALUE;
        double hi = -Double.MAX_VALUE;
        for (List<double[]> series : List.of(train, valid)) {
            for (double[] p : series) {
                maxIt = Math.max(maxIt, p[0]);
                if (Double.isFinite(p[1])) {
                    lo = Math.min(lo, p[1]);
                    hi = Math.max(hi, p[1]);
                }
            }
        }
        if (lo > hi) {
            lo = 0;
            hi = 1;
        }
        double[] yTicks = niceTicks(lo, hi, 6);
        double yMin = Math.min(lo, yTicks[0]);
        double yMax = Math.max(hi, yTicks[yTicks.length - 1]);
        double[] xTicks = niceTicks(1, Math.max(2, maxIt), 8);
        double xMin = 1;
        double xMax = Math.max(maxIt, xTicks[xTicks.length - 1]);

        BufferedImage img = new BufferedImage(w, h, BufferedImage.TYPE_INT_RGB);
        Graphics2D g = img.createGraphics();
        g.setRenderingHint(RenderingHints.KEY_ANTIALIASING, RenderingHints.VALUE_ANTIALIAS_ON);
        g.setRenderingHint(RenderingHints.KEY_TEXT_ANTIALIASING, RenderingHints.VALUE_TEXT_ANTIALIAS_ON);
        g.setColor(Color.WHITE);
        g.fillRect(0, 0, w, h);
        g.setFont(new Font(Font.SANS_SERIF, Font.PLAIN, 13));
        FontMetrics fm = g.getFontMetrics();
        Scale xs = new Scale(xMin, xMax, left, right);
        Scale ys = new Scale(yMin, yMax, bottom, top);
        for (double t : yTicks) {
            int y = ys.px(t);
            g.setColor(GRID);
            g.drawLine(left, y, right, y);
            g.setColor(Color.DARK_GRAY);
            String s = label(t);
            g.drawString(s, left - 8 - fm.stringWidth(s), y + fm.getAscent() / 2 - 1);
        }
        for (double t : xTicks) {
            if (t < xMin) {
                continue;
            }
            int x = xs.px(t);
            g.setColor(GRID);
            g.drawLine(x, top, x, bottom);
            g.setColor(Color.DARK_GRAY);
            String s = label(t);
            g.drawString(s, x - fm.stringWidth(s) / 2, bottom + 18);
        }
        g.setColor(Color.BLACK);
        g.drawRect(left, top, right - left, bottom - top);
        g.drawString("iteration", (left + right - fm.stringWidth("iteration")) / 2, h - 18);
        AffineTransform saved = g.getTransform();
        g.rotate(-Math.PI / 2);
        g.drawString("loss", -(top + bottom + fm.stringWidth("loss")) / 2, 22);
        g.setTransform(saved);
        g.setFont(new Font(Font.SANS_SERIF, Font.BOLD, 15));
        g.drawString(title, left, 30);
        g.setFont(new Font(Font.SANS_SERIF, Font.PLAIN, 13));
        plot(g, train, TRAIN, xs, ys);
        plot(g, valid, VALID, xs, ys);
        int lx = right - 170;
        legend(g, TRAIN, "training loss", lx, top + 20);
        if (!valid.isEmpty()) {
            legend(g, VALID, "validation loss", lx, top + 40);
        }
        g.dispose();
        try {
            ImageIO.write(img, "png", out.toFile());
        } catch (IOException e) {
            throw new UncheckedIOException("cannot write " + out, e);
        }
    }

    /**
     * Tick values at 1, 2 or 5 times a power of ten covering [lo, hi] with about {@code count} steps.
     *
     * @param lo smallest value to cover
     * @param hi largest value to cover
     * @param count wanted number of intervals
     * @return ascending ticks; the first is at or below lo, the last at or above hi
     */
    static double[] niceTicks(double lo, double hi, int count) {
        if (hi - lo < 1e-12 * Math.max(1, Math.abs(hi))) {
            double pad = Math.max(Math.abs(hi) * 0.05, 1e-3);
            lo -= pad;
            hi += pad;
        }
        double raw = (hi - lo) / count;
        double magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
        double step = magnitude;
        for (double m : new double[] {1, 2, 2.5, 5, 10}) {
            step = m * magnitude;
            if (step >= raw) {
                break;
            }
        }
        double first = Math.floor(lo / step) * step;
        List<Double> ticks = new ArrayList<>();
        for (double t = first; t <= hi + step * 1e-9; t += step) {
            ticks.add(t);
        }
        if (ticks.get(ticks.size() - 1) < hi) {
            ticks.add(ticks.get(ticks.size() - 1) + step);
        }
        double[] out = new double[ticks.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = new BigDecimal(ticks.get(i)).round(new java.math.MathContext(12)).doubleValue();
        }
        return out;
    }

    /** A tick label: at most four significant digits, no trailing zeros. */
    static String label(double v) {
        return MetricFormat.significant(v, 4);
    }

    private static void legend(Graphics2D g, Color c, String text, int x, int y) {
        g.setColor(c);
        g.setStroke(new BasicStroke(2.5f));
        g.drawLine(x, y - 4, x + 24, y - 4);
        g.setColor(Color.BLACK);
        g.drawString(text, x + 30, y);
    }

    private static void plot(Graphics2D g, List<double[]> series, Color color, Scale xs, Scale ys) {
        g.setColor(color);
        g.setStroke(new BasicStroke(2f));
        int px = Integer.MIN_VALUE;
        int py = 0;
        for (double[] p : series) {
            if (!Double.isFinite(p[1])) {
                px = Integer.MIN_VALUE;
                continue;
            }
            int x = xs.px(p[0]);
            int y = ys.px(p[1]);
            if (px != Integer.MIN_VALUE) {
                g.drawLine(px, py, x, y);
            }
            g.fillOval(x - 3, y - 3, 6, 6);
            px = x;
            py = y;
        }
    }

    /** Maps values to pixels linearly. */
    private record Scale(double min, double max, int from, int to) {
        int px(double v) {
            return from + (int) Math.round((to - from) * (v - min) / (max - min));
        }
    }
}
