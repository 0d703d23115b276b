package io.mcore4j.data.chat;

import com.hubspot.jinjava.objects.collections.PyList;
import jinjava.javax.el.ELContext;
import jinjava.javax.el.ELResolver;

import java.beans.FeatureDescriptor;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The methods of Python's {@code str} and {@code dict} that chat templates call ({@code content.strip('\n')},
 * {@code content.split('</think>')}, {@code text.startswith(...)}, {@code tool.items()}), with Python's meaning,
 * for jinjava, which otherwise calls Java's methods of the same name (Java's {@code split} takes a regular
 * expression and drops trailing empty parts) or finds none. Any other method is left to jinjava's resolvers.
 */
final class PythonMethods extends ELResolver {
    private static final Set<String> STRING_METHODS = Set.of("strip", "lstrip", "rstrip", "split", "startswith",
            "endswith", "upper", "lower", "title", "capitalize", "replace", "find", "count", "join", "isdigit",
            "isspace", "isalpha");
    private static final Set<String> DICT_METHODS = Set.of("items", "keys", "values", "get");

    @Override
    public Object invoke(ELContext context, Object base, Object method, Class<?>[] paramTypes, Object[] params) {
        String name = String.valueOf(method);
        Object[] args = params == null ? new Object[0] : params;
        if (base instanceof String s && STRING_METHODS.contains(name)) {
            context.setPropertyResolved(true);
            return string(s, name, args);
        }
        if (base instanceof Map<?, ?> map && DICT_METHODS.contains(name)) {
            context.setPropertyResolved(true);
            return dict(map, name, args);
        }
        return null;
    }

    private static Object string(String s, String name, Object[] args) {
        return switch (name) {
            case "strip" -> strip(s, arg(args, 0), true, true);
            case "lstrip" -> strip(s, arg(args, 0), true, false);
            case "rstrip" -> strip(s, arg(args, 0), false, true);
            case "split" -> split(s, arg(args, 0), args.length > 1 ? ((Number) args[1]).intValue() : -1);
            case "startswith" -> affix(s, args[0], true);
            case "endswith" -> affix(s, args[0], false);
            case "upper" -> s.toUpperCase(java.util.Locale.ROOT);
            case "lower" -> s.toLowerCase(java.util.Locale.ROOT);
            case "title" -> title(s);
            case "capitalize" -> s.isEmpty() ? s : s.substring(0, 1).toUpperCase(java.util.Locale.ROOT)
                    + s.substring(1).toLowerCase(java.util.Locale.ROOT);
            case "replace" -> replace(s, (String) args[0], (String) args[1], args.length > 2 ? ((Number) args[2]).intValue() : -1);
            case "find" -> (long) s.indexOf((String) args[0]);
            case "count" -> count(s, (String) args[0]);
            case "join" -> join(s, args[0]);
            case "isdigit" -> !s.isEmpty() && s.chars().allMatch(Character::isDigit);
            case "isalpha" -> !s.isEmpty() && s.chars().allMatch(Character::isLetter);
            case "isspace" -> !s.isEmpty() && s.chars().allMatch(PythonMethods::isSpace);
            default -> throw new IllegalStateException(name);
        };
    }

    private static String arg(Object[] args, int k) {
        return args.length > k && args[k] != null ? args[k].toString() : null;
    }

    /** Python's whitespace, what {@code str.strip()} and {@code str.split()} remove without an argument. */
    static boolean isSpace(int c) {
        return Character.isWhitespace(c) || Character.isSpaceChar(c) || c == 0x1c || c == 0x1d || c == 0x1e
                || c == 0x1f || c == 0x85;
    }

    private static String strip(String s, String chars, boolean left, boolean right) {
        int begin = 0;
        int end = s.length();
        while (left && begin < end && (chars == null ? isSpace(s.charAt(begin)) : chars.indexOf(s.charAt(begin)) >= 0)) {
            begin++;
        }
        while (right && end > begin && (chars == null ? isSpace(s.charAt(end - 1)) : chars.indexOf(s.charAt(end - 1)) >= 0)) {
            end--;
        }
        return s.substring(begin, end);
    }

    /** Python's {@code str.split(sep, maxsplit)}: a literal separator keeps empty parts; none splits on runs of space. */
    private static List<Object> split(String s, String sep, int maxSplit) {
        List<Object> parts = new PyList(new ArrayList<>());
        if (sep == null) {
            int i = 0;
            while (i < s.length()) {
                while (i < s.length() && isSpace(s.charAt(i))) {
                    i++;
                }
                if (i == s.length()) {
                    break;
                }
                int j = i;
                if (maxSplit >= 0 && parts.size() == maxSplit) {
                    parts.add(strip(s.substring(i), null, false, true));
                    break;
                }
                while (j < s.length() && !isSpace(s.charAt(j))) {
                    j++;
                }
                parts.add(s.substring(i, j));
                i = j;
            }
            return parts;
        }
        if (sep.isEmpty()) {
            throw new IllegalArgumentException("empty separator");
        }
        int from = 0;
        for (int at = s.indexOf(sep); at >= 0 && (maxSplit < 0 || parts.size() < maxSplit); at = s.indexOf(sep, from)) {
            parts.add(s.substring(from, at));
            from = at + sep.length();
        }
        parts.add(s.substring(from));
        return parts;
    }

    private static boolean affix(String s, Object affix, boolean prefix) {
        if (affix instanceof Iterable<?> options) {
            for (Object o : options) {
                if (prefix ? s.startsWith(o.toString()) : s.endsWith(o.toString())) {
                    return true;
                }
            }
            return false;
        }
        return prefix ? s.startsWith(affix.toString()) : s.endsWith(affix.toString());
    }

    private static String title(String s) {
        StringBuilder out = new StringBuilder(s.length());
        boolean previousCased = false;
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            out.append(previousCased ? Character.toLowerCase(c) : Character.toUpperCase(c));
            previousCased = Character.isLetter(c);
        }
        return out.toString();
    }

    private static String replace(String s, String old, String replacement, int count) {
        if (count < 0) {
            return s.replace(old, replacement);
        }
        StringBuilder out = new StringBuilder();
        int from = 0;
        for (int done = 0; done < count; done++) {
            int at = s.indexOf(old, from);
            if (at < 0) {
                break;
            }
            out.append(s, from, at).append(replacement);
            from = at + old.length();
        }
        return out.append(s.substring(from)).toString();
    }

    private static long count(String s, String sub) {
        long n = 0;
        for (int at = s.indexOf(sub); at >= 0 && !sub.isEmpty(); at = s.indexOf(sub, at + sub.length())) {
            n++;
        }
        return n;
    }

    private static String join(String sep, Object items) {
        StringBuilder out = new StringBuilder();
        Iterator<?> it = items instanceof Iterable<?> i ? i.iterator() : List.of(items).iterator();
        while (it.hasNext()) {
            out.append(PythonValues.str(it.next()));
            if (it.hasNext()) {
                out.append(sep);
            }
        }
        return out.toString();
    }

    private static Object dict(Map<?, ?> map, String name, Object[] args) {
        return switch (name) {
            case "items" -> {
                List<Object> pairs = new PyList(new ArrayList<>());
                map.forEach((k, v) -> pairs.add(new PyList(new ArrayList<>(java.util.Arrays.asList(k, v)))));
                yield pairs;
            }
            case "keys" -> new PyList(new ArrayList<>(map.keySet()));
            case "values" -> new PyList(new ArrayList<>(map.values()));
            case "get" -> map.containsKey(args[0]) ? map.get(args[0]) : args.length > 1 ? args[1] : null;
            default -> throw new IllegalStateException(name);
        };
    }

    @Override
    public Object getValue(ELContext context, Object base, Object property) {
        return null;
    }

    @Override
    public Class<?> getType(ELContext context, Object base, Object property) {
        return null;
    }

    @Override
    public void setValue(ELContext context, Object base, Object property, Object value) {}

    @Override
    public boolean isReadOnly(ELContext context, Object base, Object property) {
        return true;
    }

    @Override
    public Iterator<FeatureDescriptor> getFeatureDescriptors(ELContext context, Object base) {
        return null;
    }

    @Override
    public Class<?> getCommonPropertyType(ELContext context, Object base) {
        return null;
    }
}
