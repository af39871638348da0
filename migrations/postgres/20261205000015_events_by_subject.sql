-- What the log says about one pull or merge request (its repository and number, as ingress extracted them):
-- gitlab_poller asks whether a webhook already told of a merge request's merge or close before appending it.
CREATE INDEX events_by_subject ON events (repository, number) WHERE repository IS NOT NULL;
