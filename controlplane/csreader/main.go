// csreader counts the objects of directories exactly as Config Sync's reconciler reads them: it lists
// the files with the reconciler's own listing (pkg/parse, exported by listfiles.go) and parses each
// with the reconciler's own reader (pkg/importer/reader). It is our test oracle, not part of the product.
//
// build_configsync.sh copies this file and listfiles.go into the extracted Config Sync source at build
// time, replacing CONFIGSYNC_MODULE with the release's module path, and builds it with the release's
// vendor directory; nothing of Config Sync's is copied into our repository.
//
//	csreader [-repeat N] DIR...   one JSON line per directory
//	csreader -serve               reads one directory per line on stdin, answers one JSON line each
//
// Each line: the directory, the listed files in the reconciler's order (each with its bytes, objects
// by kind, and the errors Config Sync reports for it, code and message), the listing's error if any,
// and the seconds each of N whole reads (listing + parsing every file in one Read, as the reconciler
// does) took.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"CONFIGSYNC_MODULE/pkg/importer/filesystem/cmpath"
	"CONFIGSYNC_MODULE/pkg/importer/reader"
	"CONFIGSYNC_MODULE/pkg/parse"
	"CONFIGSYNC_MODULE/pkg/status"
)

type fileError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type fileResult struct {
	File   string         `json:"file"`
	Bytes  int64          `json:"bytes"`
	Kinds  map[string]int `json:"kinds"`
	Errors []fileError    `json:"errors"`
}

type dirResult struct {
	Dir       string       `json:"dir"`
	Files     []fileResult `json:"files"`
	ListError string       `json:"list_error,omitempty"`
	Objects   int          `json:"objects"`
	Seconds   []float64    `json:"seconds"`
}

func errorsOf(errs status.MultiError) []fileError {
	found := []fileError{}
	if errs == nil {
		return found
	}
	for _, err := range errs.Errors() {
		found = append(found, fileError{Code: "KNV" + err.Code(), Message: err.Error()})
	}
	return found
}

func relative(root, path string) string {
	rel, err := filepath.Rel(root, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return path
	}
	return rel
}

func read(dir string, repeat int) dirResult {
	result := dirResult{Dir: dir, Files: []fileResult{}, Seconds: []float64{}}
	absolute, err := filepath.Abs(dir)
	var root cmpath.Absolute
	if err == nil {
		root, err = cmpath.AbsoluteOS(absolute)
	}
	if err == nil {
		root, err = root.EvalSymlinks()
	}
	if err != nil {
		result.ListError = err.Error()
		return result
	}
	files, err := parse.ListFilesAsReconciler(root)
	if err != nil {
		result.ListError = err.Error()
		return result
	}
	for _, file := range files {
		paths := reader.FilePaths{RootDir: root, PolicyDir: cmpath.RelativeSlash(""), Files: []cmpath.Absolute{file}}
		objects, errs := (&reader.File{}).Read(paths)
		entry := fileResult{File: relative(root.OSPath(), file.OSPath()), Kinds: map[string]int{}, Errors: errorsOf(errs)}
		for _, object := range objects {
			entry.Kinds[object.GetKind()]++
		}
		if len(objects) > 0 {
			if info, err := os.Stat(file.OSPath()); err == nil {
				entry.Bytes = info.Size()
			}
		}
		result.Objects += len(objects)
		result.Files = append(result.Files, entry)
	}
	for i := 0; i < repeat; i++ {
		start := time.Now()
		listed, err := parse.ListFilesAsReconciler(root)
		if err == nil {
			(&reader.File{}).Read(reader.FilePaths{RootDir: root, PolicyDir: cmpath.RelativeSlash(""), Files: listed})
		}
		result.Seconds = append(result.Seconds, time.Since(start).Seconds())
	}
	return result
}

func main() {
	repeat := flag.Int("repeat", 0, "time N whole reads of each directory")
	serve := flag.Bool("serve", false, "read directories named one per line on stdin")
	flag.Parse()
	out := json.NewEncoder(os.Stdout)
	if *serve {
		lines := bufio.NewScanner(os.Stdin)
		lines.Buffer(make([]byte, 1<<20), 1<<20)
		for lines.Scan() {
			if err := out.Encode(read(lines.Text(), *repeat)); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
		return
	}
	for _, dir := range flag.Args() {
		if err := out.Encode(read(dir, *repeat)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
