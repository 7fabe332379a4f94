"""TensorFlow's own profile of a step or pipeline, made compact, and the change between two profiles split over the ops and tf.data stages that moved."""
