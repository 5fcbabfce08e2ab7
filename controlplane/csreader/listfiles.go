// Placed in Config Sync's pkg/parse at build time (see main.go): exports the reconciler's own file
// listing, with the arguments its readConfigFiles passes, to the oracle.
package parse

import "CONFIGSYNC_MODULE/pkg/importer/filesystem/cmpath"

// ListFilesAsReconciler lists the files of dir as the reconciler lists a commit's sync directory.
func ListFilesAsReconciler(dir cmpath.Absolute) ([]cmpath.Absolute, error) {
	return listFiles(dir, map[string]bool{".git": true})
}
