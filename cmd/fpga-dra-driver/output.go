package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// printOutput writes v as indented JSON for "-o json", or as a table of
// rows (the first row is the header) for "-o table" (the default).
func printOutput(w io.Writer, format string, v any, rows [][]string) error {
	switch strings.ToLower(format) {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "", "table":
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, r := range rows {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		return tw.Flush()
	}
	return fmt.Errorf("-o %q: use table or json", format)
}
