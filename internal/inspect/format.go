package inspect

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
)

// WriteJSON writes rep as one indented JSON document, or, when compact (for
// --watch), as one line.
func WriteJSON(w io.Writer, rep *Report, compact bool) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if !compact {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(rep)
}

// WriteTable writes rep as an aligned table for people, then a line saying
// how many locks there are and whether the listing stopped early.
func WriteTable(w io.Writer, rep *Report) error {
	if rep.Orphans != nil {
		return writeOrphans(w, rep)
	}
	if len(rep.Locks) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "DOMAIN\tKEY\tPARAMS\tHOLDER\tTRACE\tTTL\tFENCE\tQUEUE")
		for _, l := range rep.Locks {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n",
				l.Domain, show(l.Key), params(l), holderText(l), traceText(l), ttlText(l.TTLMillis), fenceText(l.Fence), l.Queue)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, l := range rep.Locks {
			if len(l.Waiters) > 0 {
				fmt.Fprintf(w, "%s waiters: %s\n", show(l.Key), waitersText(l))
			}
		}
		for _, l := range rep.Locks {
			if l.Problem != "" {
				fmt.Fprintf(w, "%s: %s\n", show(l.Key), l.Problem)
			}
		}
	}
	_, err := fmt.Fprintln(w, Summary(rep))
	return err
}

// writeOrphans is WriteTable for a listing of orphaned fence counters.
func writeOrphans(w io.Writer, rep *Report) error {
	if len(rep.Orphans) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "DOMAIN\tKEY\tPARAMS\tFENCE")
		for _, o := range rep.Orphans {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", o.Domain, show(o.Key), orphanParams(o), fenceText(o.Fence))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintln(w, Summary(rep))
	return err
}

// Summary is the last line of the table: the count, and where the listing
// stopped if it did.
func Summary(rep *Report) string {
	n := len(rep.Locks)
	s := fmt.Sprintf("%d lock%s", n, plural(n))
	if n == 0 {
		s = "no live locks"
	}
	if rep.Orphans != nil {
		n = len(rep.Orphans)
		s = fmt.Sprintf("%d orphaned fence counter%s (their lock keys do not exist)", n, plural(n))
	}
	s += fmt.Sprintf(" (%d key%s scanned, %d skipped)", rep.Scanned, plural(int(rep.Scanned)), rep.Skipped)
	switch rep.Stopped {
	case "limit":
		s += fmt.Sprintf("; stopped at the limit of %d locks: more may exist (raise --limit, or narrow with --domain or --param)", rep.Limit)
	case "timeout":
		s += fmt.Sprintf("; stopped at the timeout of %s: more may exist (raise --timeout, or narrow with --domain or --param)", rep.Timeout)
	}
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func params(l Lock) string { return paramsText(l.params) }

func orphanParams(o Orphan) string { return paramsText(o.params) }

// paramsText is a key's parameters in pattern order: name=value ….
func paramsText(ps []Param) string {
	var b []string
	for _, p := range ps {
		b = append(b, p.Name+"="+show(p.String()))
	}
	if len(b) == 0 {
		return "-"
	}
	return strings.Join(b, " ")
}

func holderText(l Lock) string {
	h := l.Holder
	if h == nil || h.Host == "" && h.Owner == "" && h.PID == 0 {
		return "token " + show(truncate(l.Token, 8))
	}
	var s string
	if h.Owner != "" {
		s = show(h.Owner) + "@"
	}
	if h.Host != "" {
		s += show(h.Host)
	} else {
		s += "?"
	}
	if h.PID != 0 {
		s += ":" + strconv.Itoa(h.PID)
	}
	return s
}

func traceText(l Lock) string {
	if l.Holder == nil || l.Holder.TraceID == "" {
		return "-"
	}
	return l.Holder.TraceID
}

func ttlText(ms int64) string {
	if ms < 0 {
		return "none"
	}
	if ms > math.MaxInt64/int64(time.Millisecond) {
		// Past ~292 years a time.Duration overflows: say it in days.
		return strconv.FormatInt(ms/(24*3600*1000), 10) + "d"
	}
	return (time.Duration(ms) * time.Millisecond).Round(100 * time.Millisecond).String()
}

func fenceText(f *int64) string {
	if f == nil {
		return "-"
	}
	return strconv.FormatInt(*f, 10)
}

// show quotes s when it has anything a terminal would not show plainly
// (space, control or invalid bytes), so that a column never breaks.
func show(s string) string {
	if s == "" {
		return `""`
	}
	for _, r := range s {
		if r == unicode.ReplacementChar || !unicode.IsGraphic(r) || unicode.IsSpace(r) || r == '"' {
			return strconv.Quote(s)
		}
	}
	return s
}
