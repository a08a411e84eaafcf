// Command gendoc writes blkcrypt's man page and shell completions from the
// CLI's options table (go generate ./internal/cli runs it), so that they
// say what blkcrypt VERB --help says.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/blkcrypt/blkcrypt/internal/cli"
)

func main() {
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintf(os.Stderr, "gendoc: %v\n", err)
		os.Exit(1)
	}
	docs := cli.GeneratedDocs()
	paths := make([]string, 0, len(docs))
	for p := range docs {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "gendoc: %v\n", err)
			os.Exit(1)
		}
		if err := os.WriteFile(full, docs[p], 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "gendoc: %v\n", err)
			os.Exit(1)
		}
		fmt.Println("wrote", p)
	}
}

// moduleRoot is the directory holding go.mod, above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("go.mod not found above %s", dir)
		}
		dir = parent
	}
}
