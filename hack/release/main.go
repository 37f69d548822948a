// Command release writes the clusterctl release assets (`make release-manifests`):
// With -templates it only rebuilds templates/cluster-template*.yaml (`make generate`).
//
// infrastructure-components.yaml, metadata.yaml and the cluster templates, as a clusterctl local
// repository under --out.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/caprf/cluster-api-provider-redfish/internal/release"
)

func main() {
	out := flag.String("out", "out", "Folder of the clusterctl local repository.")
	version := flag.String("version", "v0.1.0", "Release version (a folder name in the repository).")
	root := flag.String("root", ".", "Project root (holds config/, templates/ and metadata.yaml).")
	templatesOnly := flag.Bool("templates", false, "Only rebuild templates/cluster-template*.yaml from templates/flavors.")
	flag.Parse()
	if *templatesOnly {
		if err := release.WriteTemplates(*root); err != nil {
			fmt.Fprintln(os.Stderr, "release:", err)
			os.Exit(1)
		}
		return
	}
	path, err := release.WriteRepository(*root, *out, *version)
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}
