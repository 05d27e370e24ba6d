package tasks

import (
	"context"
	"fmt"
	"sync"
)

// Cache loads task sets on first use and looks tasks up by id. It is safe
// for concurrent use; services share one per process.
type Cache struct {
	DataRoot   string
	TasksDir   string
	LibraryDir string

	mu   sync.Mutex
	sets map[string]Index // "dataset/split" → index
}

// NewCache returns a cache over dataRoot (built-in sets) or tasksDir
// (upstream folders, when non-empty).
func NewCache(dataRoot, tasksDir, libraryDir string) *Cache {
	return &Cache{DataRoot: dataRoot, TasksDir: tasksDir, LibraryDir: libraryDir, sets: map[string]Index{}}
}

// Task returns the task id of dataset/split.
func (c *Cache) Task(ctx context.Context, dataset, split, id string) (*Task, error) {
	key := dataset + "/" + split
	c.mu.Lock()
	ix, ok := c.sets[key]
	c.mu.Unlock()
	if !ok {
		ts, err := Load(ctx, Source{Dataset: dataset, Split: split, DataRoot: c.DataRoot, TasksDir: c.TasksDir, LibraryDir: c.LibraryDir})
		if err != nil {
			return nil, err
		}
		ix = NewIndex(ts)
		c.mu.Lock()
		c.sets[key] = ix
		c.mu.Unlock()
	}
	t, ok := ix[id]
	if !ok {
		return nil, fmt.Errorf("task %q not found in %s/%s", id, dataset, split)
	}
	return t, nil
}

// Reference returns the reference solution of a task.
func (c *Cache) Reference(ctx context.Context, dataset, split, id string) (string, error) {
	t, err := c.Task(ctx, dataset, split, id)
	if err != nil {
		return "", err
	}
	if t.Reference == "" {
		return "", fmt.Errorf("task %s has no reference solution", id)
	}
	return t.Reference, nil
}

// TruthFor returns the ground truth of a task under the label set chosen
// for its dataset in sets, or the default for the verifier mode
// (Task.TruthFor).
func (c *Cache) TruthFor(ctx context.Context, dataset, split, id string, upstream bool, sets []string) (Truth, error) {
	t, err := c.Task(ctx, dataset, split, id)
	if err != nil {
		return Truth{}, err
	}
	return t.TruthFor(upstream, sets)
}

// Truth returns the ground truth of a task under its default label set.
func (c *Cache) Truth(ctx context.Context, dataset, split, id string) (Truth, error) {
	t, err := c.Task(ctx, dataset, split, id)
	if err != nil {
		return Truth{}, err
	}
	return t.Truth, nil
}
