package web_test

import (
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

func chromedpFocus(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Focus(chromedp.CSS(sel))
}

// keys sends key presses to the focused element.
func keys(names ...string) chromedp.Action[chromedp.Void] {
	var steps []chromedp.Action[chromedp.Void]
	for _, n := range names {
		k := map[string]string{"ArrowRight": kb.ArrowRight, "ArrowLeft": kb.ArrowLeft, "ArrowUp": kb.ArrowUp, "ArrowDown": kb.ArrowDown}[n]
		if k == "" {
			k = n
		}
		steps = append(steps, chromedp.KeyEvent(k))
	}
	return chromedp.Steps(steps...)
}

// markPage sets a mark on the page's window that a reload would lose.
func markPage() chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](`window.__berthMark = true`)
}

// setValue sets an input's value as typing would, firing its events.
func setValue(sel, v string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(chromedp.SetValue(chromedp.CSS(sel), v))
}
