// Package benchplot draws the small line charts that benchmarks write next
// to their figures: SVG, no dependencies, one panel per series group.
package benchplot

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Series is one line of a panel.
type Series struct {
	Name   string
	Color  string // CSS color
	Points []Point
}

// Point is one sample.
type Point struct{ X, Y float64 }

// Panel is one chart with a shared y axis.
type Panel struct {
	Title  string
	YLabel string
	Series []Series
}

// Chart is panels stacked vertically over a shared x axis.
type Chart struct {
	Title  string
	XLabel string
	Panels []Panel
}

const (
	width    = 900
	panelH   = 200
	marginL  = 70
	marginR  = 160
	marginT  = 40
	panelGap = 40
)

// WriteSVG renders c.
func (c Chart) WriteSVG(w io.Writer) error {
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for _, p := range c.Panels {
		for _, s := range p.Series {
			for _, pt := range s.Points {
				xmin, xmax = math.Min(xmin, pt.X), math.Max(xmax, pt.X)
			}
		}
	}
	if xmin >= xmax {
		xmax = xmin + 1
	}
	height := marginT + len(c.Panels)*(panelH+panelGap) + 20
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="22" font-size="16">%s</text>`+"\n", marginL, esc(c.Title))
	plotW := float64(width - marginL - marginR)
	for i, p := range c.Panels {
		top := float64(marginT + i*(panelH+panelGap))
		ymax := 0.0
		for _, s := range p.Series {
			for _, pt := range s.Points {
				ymax = math.Max(ymax, pt.Y)
			}
		}
		ymax = nice(ymax)
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" font-weight="bold">%s</text>`+"\n", marginL, top-6, esc(p.Title))
		fmt.Fprintf(&b, `<rect x="%d" y="%.0f" width="%.0f" height="%d" fill="none" stroke="#999"/>`+"\n", marginL, top, plotW, panelH)
		for k := 0; k <= 4; k++ {
			y := top + float64(panelH) - float64(k)/4*float64(panelH)
			fmt.Fprintf(&b, `<line x1="%d" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
				marginL, float64(marginL)+plotW, y, y, marginL-6, y+4, fmtNum(ymax*float64(k)/4))
		}
		fmt.Fprintf(&b, `<text x="14" y="%.0f" transform="rotate(-90 14 %.0f)" text-anchor="middle">%s</text>`+"\n", top+panelH/2, top+panelH/2, esc(p.YLabel))
		for j, s := range p.Series {
			var pts []string
			for _, pt := range s.Points {
				x := float64(marginL) + (pt.X-xmin)/(xmax-xmin)*plotW
				y := top + float64(panelH) - pt.Y/ymax*float64(panelH)
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", s.Color, strings.Join(pts, " "))
			ly := top + 14 + float64(j)*16
			fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.0f" y2="%.0f" stroke="%s" stroke-width="3"/><text x="%.0f" y="%.0f">%s</text>`+"\n",
				float64(marginL)+plotW+10, float64(marginL)+plotW+28, ly, ly, s.Color, float64(marginL)+plotW+32, ly+4, esc(s.Name))
		}
	}
	bottom := float64(marginT + len(c.Panels)*(panelH+panelGap) - panelGap)
	for k := 0; k <= 6; k++ {
		x := float64(marginL) + float64(k)/6*plotW
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x, bottom+16, fmtNum(xmin+(xmax-xmin)*float64(k)/6))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">%s</text>`+"\n", float64(marginL)+plotW/2, bottom+32, esc(c.XLabel))
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func nice(v float64) float64 {
	if v <= 0 {
		return 1
	}
	m := math.Pow(10, math.Floor(math.Log10(v)))
	for _, f := range []float64{1, 2, 2.5, 5, 10} {
		if v <= f*m {
			return f * m
		}
	}
	return 10 * m
}

func fmtNum(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
