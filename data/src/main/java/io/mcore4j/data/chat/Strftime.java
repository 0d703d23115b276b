package io.mcore4j.data.chat;

import java.time.LocalDateTime;
import java.time.format.TextStyle;
import java.util.Locale;

/** Python's {@code datetime.strftime} in the C locale (English names), for transformers' {@code strftime_now}. */
final class Strftime {
    private Strftime() {}

    /**
     * @param time the time
     * @param format Python's format: {@code %a %A %b %B %d %e %f %H %I %j %m %M %p %S %y %Y %%}
     * @return the text
     * @throws IllegalArgumentException for another directive
     */
    static String format(LocalDateTime time, String format) {
        StringBuilder out = new StringBuilder();
        for (int i = 0; i < format.length(); i++) {
            char c = format.charAt(i);
            if (c != '%' || i + 1 == format.length()) {
                out.append(c);
                continue;
            }
            char d = format.charAt(++i);
            out.append(switch (d) {
                case 'a' -> time.getDayOfWeek().getDisplayName(TextStyle.SHORT, Locale.ENGLISH);
                case 'A' -> time.getDayOfWeek().getDisplayName(TextStyle.FULL, Locale.ENGLISH);
                case 'b' -> time.getMonth().getDisplayName(TextStyle.SHORT, Locale.ENGLISH);
                case 'B' -> time.getMonth().getDisplayName(TextStyle.FULL, Locale.ENGLISH);
                case 'd' -> two(time.getDayOfMonth());
                case 'e' -> String.format(Locale.ROOT, "%2d", time.getDayOfMonth());
                case 'f' -> String.format(Locale.ROOT, "%06d", time.getNano() / 1000);
                case 'H' -> two(time.getHour());
                case 'I' -> two(time.getHour() % 12 == 0 ? 12 : time.getHour() % 12);
                case 'j' -> String.format(Locale.ROOT, "%03d", time.getDayOfYear());
                case 'm' -> two(time.getMonthValue());
                case 'M' -> two(time.getMinute());
                case 'p' -> time.getHour() < 12 ? "AM" : "PM";
                case 'S' -> two(time.getSecond());
                case 'y' -> two(time.getYear() % 100);
                case 'Y' -> String.valueOf(time.getYear());
                case '%' -> "%";
                default -> throw new IllegalArgumentException("strftime_now(\"" + format + "\"): the directive %" + d
                        + " is not supported");
            });
        }
        return out.toString();
    }

    private static String two(int v) {
        return String.format(Locale.ROOT, "%02d", v);
    }
}
