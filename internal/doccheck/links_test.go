package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pendingPages are written on other branches; until they land, a link to one
// of them is not an error.
var pendingPages = map[string]bool{}

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	fenceRE   = regexp.MustCompile("(?ms)^```.*?^```")
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// pages are README.md and every page of docs/, relative to the root.
func pages(t *testing.T, root string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, d := range docs {
		out = append(out, filepath.ToSlash(strings.TrimPrefix(d, root+string(filepath.Separator))))
	}
	return out
}

// anchors are the GitHub anchors of a page's headings, outside code blocks.
func anchors(src string) map[string]bool {
	src = fenceRE.ReplaceAllString(src, "")
	out := map[string]bool{}
	for _, m := range headingRE.FindAllStringSubmatch(src, -1) {
		out[slug(m[1])] = true
	}
	return out
}

// slug is GitHub's heading anchor: lower case, punctuation dropped, spaces
// as hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 0x7f:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestLinks: every relative link of README.md and docs/*.md names a file
// that exists, and every #anchor a heading of its page.
func TestLinks(t *testing.T) {
	root := repoRoot(t)
	all := pages(t, root)
	if len(all) < 7 {
		t.Fatalf("pages %v: README.md and the docs/ pages expected", all)
	}
	n := 0
	for _, page := range all {
		src, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		text := fenceRE.ReplaceAllString(string(src), "")
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			n++
			target, anchor, _ := strings.Cut(link, "#")
			file := page
			if target != "" {
				file = filepath.ToSlash(filepath.Join(filepath.Dir(page), target))
			}
			data, err := os.ReadFile(filepath.Join(root, file))
			if err != nil {
				// A directory is a fine link target too.
				if fi, serr := os.Stat(filepath.Join(root, file)); serr == nil && fi.IsDir() && anchor == "" {
					continue
				}
				if pendingPages[file] {
					t.Logf("%s: link to %s, which is not on this branch yet", page, file)
					continue
				}
				t.Errorf("%s: link %q: %v", page, link, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !anchors(string(data))[anchor] {
				t.Errorf("%s: link %q: %s has no heading with the anchor #%s", page, link, file, anchor)
			}
		}
	}
	if n < 20 {
		t.Errorf("only %d relative links checked", n)
	}
}

// TestOneTopicOnePage: topics that the README used to repeat live on one page.
func TestOneTopicOnePage(t *testing.T) {
	root := repoRoot(t)
	for _, topic := range []struct{ name, marker string }{
		{"the Redlock debate", "## The Redlock debate"},
		{"Kleppmann's argument", "How to do distributed locking"},
		{"antirez's answer", "Is Redlock safe?"},
		{"the schema reference", "# yaml-language-server: $schema="},
		{"the telemetry catalog", "<!-- telemetry-table -->"},
		{"the Sentinel failover figures", "100 more leases after `+switch-master`"},
		{"the guarantees", "## Guarantees"},
	} {
		var on []string
		for _, page := range pages(t, root) {
			src, err := os.ReadFile(filepath.Join(root, page))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(src), topic.marker) {
				on = append(on, page)
			}
		}
		if len(on) != 1 {
			t.Errorf("%s (%q) is on %d pages %v, want exactly 1", topic.name, topic.marker, len(on), on)
		}
	}
}
