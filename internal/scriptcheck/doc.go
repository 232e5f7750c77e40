// Package scriptcheck tests the shell scripts under scripts/ that CI runs,
// each against a stub of the command it drives, so that a script's own
// decisions (what it retries, what fails the run) are checked without
// running the real, slow command.
package scriptcheck
