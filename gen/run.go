package gen

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/lockkit/lockkit/schema"
)

const usageText = `usage: lockkit-gen [-config lockkit.yaml] [-out locks_gen.go] [-package name] [-check]

lockkit-gen turns a lockkit.yaml into typed lock helpers (a Go file).
Run it from go generate:

	//go:generate go run github.com/lockkit/lockkit/cmd/lockkit-gen -config ../lockkit.yaml -out locks_gen.go

Flags:
`

// Run is the lockkit-gen command, minus os.Exit: it parses args (the
// command line without the program name), reads the schema, writes or checks
// the generated file, reports to stderr, and returns the exit status: 0 on
// success, 1 when the schema has errors, a file cannot be read or written or
// -check finds the file stale, 2 on a misuse of the flags.
func Run(args []string, stderr io.Writer) int {
	if stderr == nil {
		stderr = io.Discard
	}
	logger := log.New(stderr, "lockkit-gen: ", 0)
	fs := flag.NewFlagSet("lockkit-gen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	config := fs.String("config", "lockkit.yaml", "the schema `file` to read")
	out := fs.String("out", "locks_gen.go", "the Go `file` to write")
	pkg := fs.String("package", "", "package `name` of the generated file, instead of the schema's")
	check := fs.Bool("check", false, "write nothing; exit 1 if -out is stale")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2 // the flag package printed the problem and the usage
	}
	if fs.NArg() > 0 {
		logger.Printf("unexpected argument %q; the schema is given with -config", fs.Arg(0))
		fs.Usage()
		return 2
	}
	if *config == "" || *out == "" {
		logger.Print("-config and -out must not be empty")
		fs.Usage()
		return 2
	}
	if *pkg != "" {
		if err := schema.CheckPackageName(*pkg); err != nil {
			logger.Printf("-package: %v", err)
			return 2
		}
	}

	if same, err := sameFile(*config, *out); err != nil {
		logger.Print(err)
		return 2
	} else if same {
		logger.Printf("-out %s names the schema file itself; writing there would replace the schema with Go code", *out)
		return 2
	}

	f, err := schema.Load(*config)
	if err != nil {
		var errs schema.Errors
		if errors.As(err, &errs) {
			for _, e := range errs {
				fmt.Fprintln(stderr, e)
			}
		} else {
			logger.Print(err)
		}
		return 1
	}
	src, err := Generate(f, Options{Package: *pkg, Config: headerConfig(*config, *out)})
	if err != nil {
		logger.Print(err)
		return 1
	}

	old, err := os.ReadFile(*out)
	switch {
	case err == nil && bytes.Equal(old, src):
		return 0 // up to date: nothing to write
	case *check && err == nil:
		logger.Printf("%s is stale: it differs from what %s generates; run go generate (or lockkit-gen without -check)", *out, *config)
		return 1
	case *check && errors.Is(err, os.ErrNotExist):
		logger.Printf("%s does not exist; run go generate (or lockkit-gen without -check) to generate it from %s", *out, *config)
		return 1
	case *check:
		logger.Print(err)
		return 1
	}
	if err := writeFile(*out, src); err != nil {
		logger.Print(err)
		return 1
	}
	return 0
}

// sameFile reports whether config and out name one file: the same path once
// cleaned, or (when both exist) the same file through links or other
// spellings.
func sameFile(config, out string) (bool, error) {
	ac, err1 := filepath.Abs(config)
	ao, err2 := filepath.Abs(out)
	if err1 == nil && err2 == nil && ac == ao {
		return true, nil
	}
	ci, err := os.Stat(config)
	if err != nil {
		return false, nil // Load reports a missing schema
	}
	oi, err := os.Stat(out)
	if err != nil {
		return false, nil // a new output file cannot be the schema
	}
	return os.SameFile(ci, oi), nil
}

// headerConfig is the schema's path as the generated header records it:
// relative to the directory of the generated file, with forward slashes, so
// that `go generate` (which runs in that directory) and `lockkit-gen -check`
// run from anywhere else produce the same bytes. It falls back to config as
// given when no relative path exists (another volume).
func headerConfig(config, out string) string {
	ac, err1 := filepath.Abs(config)
	ao, err2 := filepath.Abs(out)
	if err1 != nil || err2 != nil {
		return config
	}
	rel, err := filepath.Rel(filepath.Dir(ao), ac)
	if err != nil {
		return config
	}
	return filepath.ToSlash(rel)
}

// writeFile replaces path with data through a temporary file in the same
// directory, so that a reader never sees half a file.
func writeFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing to remove
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
